"""Hosted providers at the front door, end to end (issue 42, first slice): the session's control plane
and operator, a simulated engine for a self-hosted model, one gateway replica (Envoy + `serve --auth
--providers`) and a local HTTPS server with a CA made by the test standing in for a provider.

The `openai` client with one base URL and one key reaches the self-hosted model and a model only
the Provider serves; a key whose model list lacks the hosted model gets OpenAI's 404; the key is
charged at the provider's prices; the provider's faults reach the client OpenAI-shaped; a Provider
whose Secret is missing says so in its condition and an event; an http:// Provider is refused at
admission with a sentence; and the provider key is searched for in the gateway's and Envoy's logs,
the metrics, every status and every event of the namespace, and found nowhere.
"""

from __future__ import annotations

import json
import pathlib
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from tests.e2e.support import Kubectl, eventually, simulated_fleet
from tests.unit.gateway.fake_provider import PROVIDER_KEY, FakeProvider, InThread, make_ca

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCAL, HOSTED, UPSTREAM_ID = "local-chat", "hosted-chat", "provider-model-2025"
INPUT_PER_M, OUTPUT_PER_M = 2.5, 10.0


def _deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": name},
            "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": name},
                     "serving": {"maxModelLen": 4096, "maxConcurrency": 16}, "parallelism": {"objective": "Cost"},
                     "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}, "replicas": 1}}


def _provider(name: str, url: str, secret: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "shardwise.io/v1alpha1", "kind": "Provider", "metadata": {"name": name},
            "spec": {"baseURL": url, "keySecretRef": {"name": secret},
                     "models": [{"name": HOSTED if name == "acme" else f"{name}-model", "id": UPSTREAM_ID,
                                 "prices": {"input": str(INPUT_PER_M), "output": str(OUTPUT_PER_M)}}], **spec}}


class Setup:
    def __init__(self, kubectl: Kubectl, door: FrontDoor, fake: FakeProvider, token: str, narrow: str) -> None:
        self.kubectl, self.door, self.fake, self.token, self.narrow = kubectl, door, fake, token, narrow

    def key(self, name: str, models: list[str], **limits: int) -> str:
        """A new key (Secret + APIKey), created as the docs say; returns the token."""
        token = f"sk-{uuid.uuid4().hex}"
        self.kubectl.run("create", "secret", "generic", f"{name}-key", f"--from-literal=key={token}")
        self.kubectl.run("label", "secret", f"{name}-key", "shardwise.io/api-key=true")
        self.kubectl.apply_yaml(json.dumps({"apiVersion": "shardwise.io/v1alpha1", "kind": "APIKey",
                                            "metadata": {"name": name},
                                            "spec": {"secretName": f"{name}-key", "models": models, **limits}}))
        return token

    def client(self, token: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.door.base_url, api_key=token or self.token, max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def front(cluster: LocalCluster, operator: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    namespace = f"gwp-{uuid.uuid4().hex[:8]}"
    for crd in ("apikeys", "providers"):
        cluster.install_crd(ROOT / f"crds/{crd}.shardwise.io.yaml")
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    ca, cert, key = make_ca(tmp_path_factory.mktemp("provider-ca"))
    fake = FakeProvider()
    upstream = InThread(fake, cert, key, UPSTREAM_ID)
    fleet = simulated_fleet(cluster, namespace, "gwp")
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gwp-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1, extra_args=("--auth", "--providers", "--key-status-interval", "1", "--provider-probe-interval", "2",
                                                      "--lease-namespace", namespace))
    fleet.start()
    try:
        kubectl.apply_yaml(json.dumps(_deployment(LOCAL)))
        # As the docs say: Secrets by `kubectl create secret`, never an apply that keeps a copy of the key.
        kubectl.run("create", "secret", "generic", "acme-key", f"--from-literal=key={PROVIDER_KEY}")
        kubectl.run("create", "secret", "generic", "acme-ca", f"--from-file=ca.crt={ca}")
        kubectl.run("label", "secret", "acme-key", "acme-ca", "shardwise.io/provider-secret=true")
        kubectl.apply_yaml(json.dumps(_provider("acme", f"https://localhost:{upstream.port}/v1", "acme-key",
                                                tls={"caBundleSecretRef": {"name": "acme-ca"}})))
        setup = Setup(kubectl, door, fake, "", "")
        setup.token, setup.narrow = setup.key("wide", []), setup.key("narrow", [LOCAL])
        door.start()
        eventually(lambda: _chat(setup, LOCAL).status_code == 200, timeout=90, what="self-hosted model served")
        eventually(lambda: _chat(setup, HOSTED).status_code == 200, timeout=60, what="hosted model served")
        yield setup
    finally:
        door.stop()
        fleet.stop()
        upstream.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _chat(front: Setup, model: str, content: str = "hi", token: str | None = None) -> httpx.Response:
    return httpx.post(f"{front.door.base_url}/chat/completions", timeout=30,
                      headers={"authorization": f"Bearer {token or front.token}"},
                      json={"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 3})


def _status(front: Setup, kind: str, name: str) -> dict[str, Any]:
    return (front.kubectl.get(kind, name) or {}).get("status") or {}


def test_one_url_one_key_a_self_hosted_and_a_hosted_model_charged_at_the_provider_prices(front: Setup) -> None:
    client = front.client()
    assert {m.id for m in client.models.list()} == {LOCAL, HOSTED}
    assert client.chat.completions.create(model=LOCAL, messages=[{"role": "user", "content": "a"}], max_tokens=2)
    assert client.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "a"}], max_tokens=2)
    # A key of its own for the hosted requests: its status counts them only (a self-hosted request is
    # charged at its deployment's status price, which the operator moves as it measures).
    client = front.client(front.key("billed", [HOSTED]))
    eventually(lambda: [m.id for m in client.models.list()] == [HOSTED], timeout=30, what="new key in force")
    seen_before = len(front.fake.seen)
    expected = 0.0
    for i in range(3):
        answer = client.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": f"q{i}"}],
                                                max_tokens=5)
        expected += (answer.usage.prompt_tokens * INPUT_PER_M + answer.usage.completion_tokens * OUTPUT_PER_M) / 1e6
    chunks = list(client.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "s"}],
                                                 max_tokens=4, stream=True))
    usage = next(c.usage for c in chunks if c.usage)  # the gateway asked for it: the key is charged from it
    expected += (usage.prompt_tokens * INPUT_PER_M + usage.completion_tokens * OUTPUT_PER_M) / 1e6
    reached = front.fake.seen[seen_before:]
    assert len(reached) == 4 and all(s["model"] == UPSTREAM_ID and s["authorization"] == f"Bearer {PROVIDER_KEY}"
                                     for s in reached)
    status = eventually(lambda: (s := _status(front, "apikey", "billed")).get("requests") == 4 and s or None,
                        timeout=30, what="4 requests on the key's status")
    assert abs(status["costUSD"] - expected) <= 0.01 * expected, (status, expected)


def test_a_key_without_the_hosted_model_gets_404_and_the_list_leaves_it_out(front: Setup) -> None:
    narrow = front.client(front.narrow)
    assert [m.id for m in narrow.models.list()] == [LOCAL]
    with pytest.raises(openai.NotFoundError):
        narrow.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "x"}])


def test_a_hosted_model_obeys_the_key_quota(front: Setup) -> None:
    token = front.key("once", [HOSTED], requestsPerMinute=1)
    eventually(lambda: _chat(front, HOSTED, token=token).status_code == 200, timeout=30, what="quota key in force")
    seen = len(front.fake.seen)
    over = _chat(front, HOSTED, token=token)
    assert over.status_code == 429 and over.json()["error"]["type"] == "requests" and int(over.headers["retry-after"]) >= 1
    assert len(front.fake.seen) == seen  # refused before the provider


def test_provider_faults_reach_the_client_openai_shaped(front: Setup) -> None:
    limited = _chat(front, HOSTED, "fault:429")
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    failed = _chat(front, HOSTED, "fault:500")
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"


def test_a_reset_mid_stream_raises_in_the_client_after_what_came_before(front: Setup) -> None:
    got: list[str] = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for chunk in front.client().chat.completions.create(
                model=HOSTED, messages=[{"role": "user", "content": "fault:reset"}], stream=True):
            got += [c.delta.content or "" for c in chunk.choices]
    assert got == ["par"]


def test_an_unreachable_provider_is_a_condition_an_event_and_an_openai_503(front: Setup) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    front.kubectl.apply_yaml(json.dumps(_provider("gone", f"https://localhost:{port}/v1", "acme-key",
                                                  connectTimeoutSeconds=2)))
    condition = eventually(lambda: next((c for c in _status(front, "provider", "gone").get("conditions", [])
                                         if c["type"] == "Reachable" and c["status"] == "False"), None),
                           timeout=60, what="gone Unreachable")
    assert condition["reason"] == "Unreachable" and f"localhost:{port}" in condition["message"]
    eventually(lambda: [e for e in front.kubectl.get("events")["items"]
                        if e["involvedObject"]["name"] == "gone" and e["reason"] == "Unreachable"] or None,
               timeout=30, what="Unreachable event")
    answer = _chat(front, "gone-model")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "provider_unavailable", answer.text


def test_the_provider_is_reachable_and_a_missing_secret_is_a_condition_and_an_event(front: Setup) -> None:
    reachable = eventually(lambda: next((c for c in _status(front, "provider", "acme").get("conditions", [])
                                         if c["type"] == "Reachable" and c["status"] == "True"), None),
                           timeout=60, what="acme Reachable")
    assert reachable["reason"] == "Reachable"
    front.kubectl.apply_yaml(json.dumps(_provider("orphan", "https://localhost:9/v1", "no-such-secret")))
    condition = eventually(lambda: next((c for c in _status(front, "provider", "orphan").get("conditions", [])
                                         if c["type"] == "Reachable"), None), timeout=60, what="orphan condition")
    assert (condition["status"], condition["reason"]) == ("False", "SecretMissing")
    events = eventually(lambda: [e for e in front.kubectl.get("events")["items"]
                                 if e["involvedObject"]["name"] == "orphan" and e["reason"] == "SecretMissing"] or None,
                        timeout=30, what="SecretMissing event")
    assert "no-such-secret" in events[0]["message"]
    assert "orphan-model" not in {m.id for m in front.client().models.list()}  # nothing served from it


def test_an_http_provider_is_refused_at_admission_with_a_sentence(front: Setup) -> None:
    refused = front.kubectl.run("apply", "-f", "-", check=False,
                                input=json.dumps(_provider("plain", "http://api.example.com/v1", "acme-key")))
    assert refused.returncode != 0 and "must never cross the network in clear text" in refused.stderr
    bad_price = _provider("badprice", "https://api.example.com/v1", "acme-key")
    bad_price["spec"]["models"][0]["prices"]["output"] = "ten"
    refused = front.kubectl.run("apply", "-f", "-", check=False, input=json.dumps(bad_price))
    assert refused.returncode != 0 and "prices.output" in refused.stderr


def test_the_provider_key_is_nowhere_but_at_the_provider(front: Setup) -> None:
    _chat(front, HOSTED)
    places = {
        "gateway log": front.door.gateway.log_path.read_text(errors="replace"),
        "envoy log": front.door.envoy.log_path.read_text(errors="replace"),
        "metrics": httpx.get(front.door.metrics_url).text,
        "envoy stats and config": httpx.get(f"http://127.0.0.1:{front.door.admin_port}/stats").text
        + httpx.get(f"http://127.0.0.1:{front.door.admin_port}/config_dump").text,
        "statuses": json.dumps([front.kubectl.get(kind) for kind in ("providers", "apikeys", "infd")]),
        "events": json.dumps(front.kubectl.get("events")),
    }
    for where, text in places.items():
        assert PROVIDER_KEY not in text, where


SPILLY = "spilly"


def test_a_model_at_zero_answers_through_its_spillover_provider_at_once_then_from_its_engines(front: Setup) -> None:
    import time  # noqa: PLC0415 - this test alone times an answer

    infd = _deployment(SPILLY)
    del infd["spec"]["replicas"]
    infd["spec"]["autoscaling"] = {"minReplicas": 0, "maxReplicas": 1, "allowScaleToZero": True,
                                   "slo": {"ttftP95": "500ms"}, "evaluationPeriodSeconds": 3,
                                   "scaleToZeroAfterSeconds": 10}
    infd["spec"]["spillover"] = {"provider": "acme", "model": HOSTED, "when": ["Waking"], "maxShare": 1}
    front.kubectl.apply_yaml(json.dumps(infd))
    eventually(lambda: (front.kubectl.get("infd", SPILLY).get("status") or {}).get("desiredReplicas") == 0,
               timeout=90, what=f"{SPILLY} at zero replicas")
    eventually(lambda: not front.kubectl.get("pods", selector=f"shardwise.io/inference-deployment={SPILLY}")["items"],
               timeout=90, what=f"{SPILLY} has no pod")
    seen_before = len(front.fake.seen)
    started = time.monotonic()
    raw = front.client().chat.completions.with_raw_response.create(
        model=SPILLY, messages=[{"role": "user", "content": "wake up"}], max_tokens=2)
    seconds = time.monotonic() - started
    ns = front.kubectl.namespace
    assert raw.headers.get("x-shardwise-served-by") == f"provider/{ns}/acme"
    assert raw.parse().choices  # the provider's answer
    assert seconds < 1.0, seconds
    print(f"\nspilled answer from zero after {seconds:.3f} s")
    reached = front.fake.seen[seen_before:]
    assert reached and reached[0]["model"] == UPSTREAM_ID and reached[0]["authorization"] == f"Bearer {PROVIDER_KEY}"
    # a stream spills whole too, and says where it came from before its first byte
    with front.client().chat.completions.with_streaming_response.create(
            model=SPILLY, messages=[{"role": "user", "content": "s"}], max_tokens=3, stream=True) as streamed:
        served = streamed.headers.get("x-shardwise-served-by")
        assert sum(1 for _ in streamed.iter_lines()) > 0
    # the wake signal was written although nothing was held: the engines come, and answer from then on
    eventually(lambda: "shardwise.io/wake-requested" in (front.kubectl.get("infd", SPILLY)["metadata"].get(
        "annotations") or {}), timeout=20, what="the wake annotation")

    def self_hosted() -> Any:
        answer = front.client().chat.completions.with_raw_response.create(
            model=SPILLY, messages=[{"role": "user", "content": "again"}], max_tokens=2)
        return answer.headers.get("x-shardwise-served-by") == "self-hosted" and answer
    answer = eventually(self_hosted, timeout=180, what="answered by its own engine once Ready")
    assert answer.headers.get("x-gateway-destination-endpoint-served", "").endswith(":8000")
    assert served in (f"provider/{ns}/acme", "self-hosted")  # the replica may be Ready by the stream
    spilled = [line for line in httpx.get(front.door.metrics_url).text.splitlines()
               if line.startswith(f'shardwise_gateway_spilled_requests_total{{model="{SPILLY}",provider="{ns}/acme"}}')]
    assert spilled and float(spilled[0].rsplit(" ", 1)[1]) >= 1
    # a JSON answer of the hosted model also names its path
    assert _chat(front, HOSTED).headers.get("x-shardwise-served-by") == f"provider/{ns}/acme"


def test_a_spillover_naming_nothing_sensible_is_refused_at_admission_with_a_sentence(front: Setup) -> None:
    own = _deployment("selfish")
    own["spec"]["spillover"] = {"provider": "acme", "model": "selfish"}  # its own served name
    refused = front.kubectl.run("apply", "-f", "-", check=False, input=json.dumps(own))
    assert refused.returncode != 0 and "must name a model the Provider offers" in refused.stderr
    for bad, words in (({"provider": "Not A Name", "model": HOSTED}, "spillover.provider"),
                       ({"provider": "acme", "model": HOSTED, "when": ["Overloaded"]}, "spillover.when"),
                       ({"provider": "acme", "model": HOSTED, "maxShare": 0}, "spillover.maxShare"),
                       ({"model": HOSTED}, "spillover.provider")):
        infd = _deployment("nonsense")
        infd["spec"]["spillover"] = bad
        refused = front.kubectl.run("apply", "-f", "-", check=False, input=json.dumps(infd))
        assert refused.returncode != 0 and words in refused.stderr, (bad, refused.stderr)
