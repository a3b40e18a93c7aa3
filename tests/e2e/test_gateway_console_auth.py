"""Who sees usage, end to end: a gateway with `serve --auth` (Envoy + the service, the session's
control plane and operator, a simulated engine). /console needs an API key whose APIKey has
`console: true`; without it 401/403 and nothing per key. The /metrics on the console's port (the
one a client can reach) carries no per-key series; the metrics port (Prometheus's) has them.
Key Secrets are made as docs/gateway.md says: `kubectl create secret generic`, then labelled.
"""

from __future__ import annotations

import base64
import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from tests.e2e.support import Kubectl, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "usage"


class Setup:
    def __init__(self, kubectl: Kubectl, door: FrontDoor) -> None:
        self.kubectl, self.door = kubectl, door
        self.namespace = kubectl.namespace

    def key(self, name: str, **spec: Any) -> str:
        token = f"sk-{uuid.uuid4().hex}"
        self.kubectl.run("create", "secret", "generic", f"{name}-key", f"--from-literal=key={token}")
        self.kubectl.run("label", "secret", f"{name}-key", "shardwise.io/api-key=true")
        self.kubectl.apply_yaml(json.dumps({"apiVersion": "shardwise.io/v1alpha1", "kind": "APIKey",
                                            "metadata": {"name": name},
                                            "spec": {"secretName": f"{name}-key", **spec}}))
        return token


@pytest.fixture(scope="module")
def front(cluster: LocalCluster, operator: Any) -> Iterator[Setup]:
    namespace = f"gwc-{uuid.uuid4().hex[:8]}"
    cluster.install_crd(ROOT / "crds/apikeys.shardwise.io.yaml")
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    fleet = simulated_fleet(cluster, namespace, "gwc")
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gwc-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1, extra_args=("--auth", "--lease-namespace", namespace))
    fleet.start()
    try:
        kubectl.apply_yaml(json.dumps({
            "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": MODEL},
            "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": MODEL},
                     "serving": {"maxModelLen": 4096, "maxConcurrency": 16}, "parallelism": {"objective": "Cost"},
                     "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}, "replicas": 1}}))
        door.start()
        yield Setup(kubectl, door)
    finally:
        door.stop()
        fleet.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _post(door: FrontDoor, token: str) -> httpx.Response:
    return httpx.post(f"{door.base_url}/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2},
                      headers={"authorization": f"Bearer {token}"}, timeout=30)


def _console(door: FrontDoor, authorization: str | None) -> httpx.Response:
    return httpx.get(door.console_url, headers={"authorization": authorization} if authorization else {}, timeout=10)


def _basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"me:{token}".encode()).decode()


def test_the_console_and_per_key_metrics_are_only_for_who_may_see_them(front: Setup) -> None:
    viewer = front.key("viewer", console=True)
    caller = front.key("caller", requestsPerMinute=1)
    eventually(lambda: _post(front.door, caller).status_code == 200, timeout=90, what="the caller's key served")
    # A second request at 1/min: a 429, so the per-key rows carry usage and a refusal.
    eventually(lambda: _post(front.door, caller).status_code == 429, timeout=30, what="the caller's 429")
    caller_id = f"{front.namespace}/caller"

    for authorization, status in ((None, 401), ("Bearer sk-not-a-key", 401), (_basic("sk-not-a-key"), 401),
                                  (f"Bearer {caller}", 403), (_basic(caller), 403)):
        refused = _console(front.door, authorization)
        assert refused.status_code == status, (authorization, refused.status_code, refused.text)
        assert front.namespace not in refused.text and "data-key" not in refused.text
        assert ("www-authenticate" in refused.headers) == (status == 401)

    for authorization in (f"Bearer {viewer}", _basic(viewer)):
        page = eventually(lambda: _console(front.door, authorization), timeout=30, what="the console for viewer")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert f'data-key="{caller_id}"' in page.text and 'data-field="access"' not in page.text

    public = httpx.get(front.door.public_metrics_url, timeout=10).text
    assert "shardwise_gateway_requests_total" in public
    assert "key=" not in public and caller_id not in public
    every = httpx.get(front.door.metrics_url, timeout=10).text
    assert f'shardwise_gateway_key_requests_total{{code="429",key="{caller_id}",model="{MODEL}"}}' in every
    assert f'shardwise_gateway_rate_limited_total{{key="{caller_id}",limit="requests"}}' in every
