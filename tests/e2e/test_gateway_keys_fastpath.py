"""The keyed fast path end to end (issue 41): with `--auth`, a key without limits asking a served
model is admitted by Envoy (keys_lua.py) and never reaches the ext_proc service, while its usage
still reaches its APIKey status once per request; a key with limits still takes the picker; a
revoked key is refused at its next request. One gateway (Envoy + `shardwise gateway serve --auth`
with a real Redis), the session's control plane and operator, simulated engines.
"""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from shardwise.devcluster.redis import RedisServer
from tests.e2e.support import Kubectl, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "keyed-fast"
EXT_PROC_STREAMS = "http.gateway.ext_proc.route.streams_started"  # every request that crossed into the service
FAST_REQUESTS = "cluster.fast.upstream_rq_total"


class Setup:
    def __init__(self, kubectl: Kubectl, door: FrontDoor) -> None:
        self.kubectl, self.door = kubectl, door

    def key(self, name: str, **spec: Any) -> str:
        token = f"sk-{uuid.uuid4().hex}"
        secret = {"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": f"{name}-key", "labels": {"shardwise.io/api-key": "true"}},
                  "stringData": {"key": token}}
        apikey = {"apiVersion": "shardwise.io/v1alpha1", "kind": "APIKey", "metadata": {"name": name},
                  "spec": {"secretName": f"{name}-key", **spec}}
        self.kubectl.apply_yaml(json.dumps({"apiVersion": "v1", "kind": "List", "items": [secret, apikey]}))
        return token

    def status(self, name: str) -> dict[str, Any]:
        return (self.kubectl.get("apikey", name) or {}).get("status") or {}


@pytest.fixture(scope="module")
def front(cluster: LocalCluster, operator: Any) -> Iterator[Setup]:
    namespace = f"gwf-{uuid.uuid4().hex[:8]}"
    cluster.install_crd(ROOT / "crds/apikeys.shardwise.io.yaml")
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    fleet = simulated_fleet(cluster, namespace, "gwf")
    redis = RedisServer(cluster.log_dir, name=f"redis-{namespace}")
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gwf-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1, extra_args=("--auth", "--redis-url", redis.url, "--key-status-interval", "1",
                                                      "--lease-namespace", namespace))
    fleet.start()
    redis.start()
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
        redis.stop()
        fleet.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _post(door: FrontDoor, token: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{door.base_url}/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": MODEL, "prompt": "x", "max_tokens": 3, **extra}, timeout=30)


def test_keyed_requests_of_a_served_model_never_reach_the_ext_proc_service(front: Setup) -> None:
    door = front.door
    token = front.key("fast", models=[MODEL])
    served = 0  # every 200 is charged once, whichever path it took

    def fast_once() -> bool:  # in force once a request of it takes no ext_proc stream
        nonlocal served
        before = door.envoy_counter(EXT_PROC_STREAMS)
        ok = _post(door, token).status_code == 200
        served += ok
        return ok and door.envoy_counter(EXT_PROC_STREAMS) == before
    eventually(fast_once, timeout=90, what="the key admitted by Envoy alone")
    crossed, fast = door.envoy_counter(EXT_PROC_STREAMS), door.envoy_counter(FAST_REQUESTS)
    client = openai.OpenAI(base_url=door.base_url, api_key=token, max_retries=0)
    for _ in range(3):
        client.completions.create(model=MODEL, prompt="one two three", max_tokens=5)
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "s"}],
                                                     max_tokens=6, stream=True))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6  # asked for by Envoy
    assert door.envoy_counter(EXT_PROC_STREAMS) == crossed  # not one request crossed into Python
    assert door.envoy_counter(FAST_REQUESTS) == fast + 9
    # ... and each was counted once into the key's usage (the access log, Redis, the status writer)
    expected = {"requests": served + 9, "completionTokens": 3 * served + 3 * (5 + 4 + 6)}
    eventually(lambda: {k: front.status("fast").get(k) for k in expected} == expected, timeout=30,
               what=f"the status counting {expected}")
    # A key with limits still takes the picker (its buckets live in Redis, behind the service).
    limited = front.key("limited", models=[MODEL], requestsPerMinute=1000)
    eventually(lambda: _post(door, limited).status_code == 200, timeout=30, what="the limited key works")
    crossed = door.envoy_counter(EXT_PROC_STREAMS)
    assert _post(door, limited).status_code == 200 and door.envoy_counter(EXT_PROC_STREAMS) == crossed + 1
    # Refusals come from the picker, as before: a wrong key, a model the key may not use.
    wrong = _post(door, "sk-not-a-key")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    narrow = front.key("narrow", models=["another-model"])
    eventually(lambda: _post(door, narrow).status_code == 404, timeout=30, what="the narrow key refused its model")
    assert _post(door, narrow).json()["error"]["code"] == "model_not_found"


def test_a_revoked_fast_key_is_refused_at_its_next_request(front: Setup) -> None:
    door = front.door
    token = front.key("revoked", models=[MODEL])
    eventually(lambda: _post(door, token).status_code == 200, timeout=60, what="the key works")
    front.kubectl.run("delete", "apikey", "revoked")
    eventually(lambda: _post(door, token).status_code == 401, timeout=5, interval=0.05, what="revoked within 5 s")
