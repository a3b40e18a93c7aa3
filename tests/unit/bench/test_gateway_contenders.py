"""bench/gateway_contenders.py: the Envoy floor's bootstrap is one a real Envoy accepts."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

import gateway_contenders as contenders  # noqa: E402

ENGINES = ["127.230.0.1:8000", "127.230.0.2:8000"]


def test_bootstrap_round_robins_over_every_engine() -> None:
    config = yaml.safe_load(contenders.envoy_bootstrap(10000, 10001, ENGINES))
    cluster = config["static_resources"]["clusters"][0]
    assert cluster["lb_policy"] == "ROUND_ROBIN"
    addresses = [e["endpoint"]["address"]["socket_address"]
                 for e in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]]
    assert [f"{a['address']}:{a['port_value']}" for a in addresses] == ENGINES


def test_bootstrap_is_valid_for_envoy(tmp_path: pathlib.Path) -> None:
    try:
        binary = contenders.envoy_binary()
    except contenders.Unavailable as why:
        pytest.skip(str(why))
    path = tmp_path / "envoy.yaml"
    path.write_text(contenders.envoy_bootstrap(10000, 10001, ENGINES))
    result = subprocess.run([str(binary), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_shardwise_objects_make_one_ready_pod_per_engine() -> None:
    objects = contenders.serving_objects("bench", ENGINES)
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert len(pods) == 2
    assert all(p["metadata"]["labels"]["shardwise.io/inference-deployment"] == contenders.MODEL for p in pods)
    deployment = next(o for o in objects if o["kind"] == "InferenceDeployment")
    assert deployment["spec"]["model"]["servedName"] == contenders.MODEL
    status = contenders.ready_pod_status("127.230.0.1")["status"]
    assert status["podIP"] == "127.230.0.1" and status["conditions"] == [{"type": "Ready", "status": "True"}]
