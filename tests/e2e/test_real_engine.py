"""An InferenceDeployment served by the REAL vLLM 0.32 engine (CPU build, tiny local model).

The operator renders its Deployment as for any GPU cluster; the pod's image asks the local fleet
for the real engine, which runs the rendered `vllm serve` argv (changing only the model path, the
bind address and CPU device settings, and logging each change) and plays the kubelet's probes. So
this checks, on a live engine: Ready only after vLLM's /health answers, the official OpenAI client
answered, and status latency, throughput and cost computed from vLLM's own /metrics agreeing with
what the client measured.
"""

from __future__ import annotations

import pathlib
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e import real_engine_support as rs
from tests.e2e.support import Kubectl, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(1800)]

NAME = "tiny-8b"
SERVED = "tiny"
PRICE = 2.0
MANIFEST = f"""
apiVersion: shardwise.io/v1alpha1
kind: InferenceDeployment
metadata: {{name: {NAME}}}
spec:
  model: {{name: meta-llama/Llama-3.1-8B-Instruct, servedName: {SERVED}}}
  serving: {{maxModelLen: 1024, maxConcurrency: 4, image: "{LOCAL_VLLM_CPU_IMAGE}"}}
  parallelism: {{tensor: 1, pipeline: 1}}
  placement: {{gpuProducts: [NVIDIA-L40S]}}
  replicas: 1
  pricing: {{gpuHourUSD: "{PRICE:.2f}"}}
"""


@pytest.fixture(scope="module")
def real_home() -> pathlib.Path:
    return rs.install_real_engine()


@pytest.fixture
def real_fleet(cluster: LocalCluster, namespace: str, real_home: pathlib.Path) -> Iterator[Any]:
    process = rs.start_fleet(cluster, namespace, real_home)
    try:
        yield process
    finally:
        rs.stop_fleet(process)


def _health(ip: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


def _pod(kubectl: Kubectl) -> dict[str, Any] | None:
    listing = kubectl.get("pods", selector=f"shardwise.io/inference-deployment={NAME}") or {"items": []}
    return listing["items"][0] if listing["items"] else None


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_real_engine_serves_and_the_status_agrees_with_the_client(
        operator: OperatorProcess, kubectl: Kubectl, real_fleet: Any) -> None:
    kubectl.apply_yaml(MANIFEST)

    # Ready must follow vLLM's /health: watch both until the resource says Ready.
    seen_not_ready_while_running = False
    health_up = False
    ip = None
    for _ in rs.iter_poll(1200, 1.0):
        assert real_fleet.alive(), real_fleet.log_tail()
        pod = _pod(kubectl)
        ip = (pod or {}).get("status", {}).get("podIP")
        if not ip:
            continue
        health_up = health_up or _health(ip)
        if pod["status"].get("phase") == "Running" and not _pod_ready(pod):
            seen_not_ready_while_running = True
        status = (kubectl.get("infd", NAME) or {}).get("status") or {}
        if status.get("readyReplicas"):
            assert health_up or _health(ip), "the resource turned Ready before vLLM's /health answered"
            break
    else:
        raise AssertionError(f"{NAME} never turned Ready; fleet log:\n{real_fleet.log_tail()}")
    assert seen_not_ready_while_running, "the pod was Ready before the engine started"
    assert _pod(kubectl)["status"]["containerStatuses"][0]["restartCount"] == 0

    # What ran is what the operator rendered, with the local changes written down.
    engine_log = next((real_fleet.log_path.parent / f"real-{kubectl.namespace}").glob("*.log")).read_text()
    assert "changed from the rendered container: model meta-llama/Llama-3.1-8B-Instruct" in engine_log

    with rs.ClosedLoopClient(f"http://{ip}:8000/v1", SERVED, think_s=0.3) as client:
        # The operator scrapes every 2 s over a 15 s window (COMPRESSED_TIMINGS): compare its
        # status with the client's figures over the same trailing 15 s, a few times over.
        last: Any = None
        for elapsed in rs.iter_poll(300, 3.0):
            if elapsed < 25:
                continue  # let the window fill with steady load
            status = kubectl.get("infd", NAME)["status"]
            latency, cost = status.get("latency") or {}, status.get("cost") or {}
            now = rs.time.monotonic()
            mine = rs.figures(client.snapshot(), now - 15, now)
            last = (latency, cost, mine)
            if _agree(latency, cost, mine):
                break
        else:
            raise AssertionError(f"status never agreed with the client: {last}")
    done = client.snapshot()
    assert done and all(r.error is None for r in done), [r.error for r in done if r.error][:3]
    assert all(r.completion_tokens is not None for r in done)
    print(f"\nreal engine: status {last[0]}\ncost {last[1]}\nclient {last[2]}")


def _agree(latency: dict[str, Any], cost: dict[str, Any], mine: rs.ClientFigures) -> bool:
    if None in (mine.ttft_p50_s, mine.ttft_p95_s, mine.itl_p50_s, mine.itl_p95_s) or mine.requests < 5:
        return False
    needed = ("ttftP50Ms", "ttftP95Ms", "itlP50Ms", "itlP95Ms", "outputTokensPerSecond")
    if any(latency.get(k) is None for k in needed) or cost.get("perMillionOutputTokensUSD") is None:
        return False
    # Latency: PromQL's histogram_quantile can say no more than which bucket a quantile is in,
    # and the client's clock adds its own overhead: agreement is within one bucket or that slack.
    pairs = ((latency["ttftP50Ms"], mine.ttft_p50_s, rs.TTFT_BUCKETS),
             (latency["ttftP95Ms"], mine.ttft_p95_s, rs.TTFT_BUCKETS),
             (latency["itlP50Ms"], mine.itl_p50_s, rs.ITL_BUCKETS),
             (latency["itlP95Ms"], mine.itl_p95_s, rs.ITL_BUCKETS))
    if not all(rs.engine_agrees_with_client(ms / 1000, s, buckets) for ms, s, buckets in pairs):
        return False
    # Throughput: the same tokens counted on both ends over nearly the same 15 s (the scrape
    # lags by up to one 2 s interval): within 25%.
    rate = latency["outputTokensPerSecond"]
    if not 0.75 * mine.output_tokens_per_s <= rate <= 1.25 * mine.output_tokens_per_s:
        return False
    # Cost: one L40S at the spec's price, spread over the observed output tokens.
    if cost.get("hourlyUSD") != pytest.approx(PRICE) or cost.get("priceSource") != "spec":
        return False
    client_per_million = PRICE / (mine.output_tokens_per_s * 3600) * 1e6
    return 0.75 * client_per_million <= cost["perMillionOutputTokensUSD"] <= 1.25 * client_per_million
