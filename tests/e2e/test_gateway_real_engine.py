"""The front door in front of the REAL vLLM 0.32 engine (CPU build, tiny local model): two replicas.

1. Prefix affinity. The same multi-turn trace shape (8 conversations x 6 turns, each turn = the
   whole conversation so far + a new user message, a ~500-token system prompt per conversation)
   goes once through the gateway (least load + CHWBL prefix affinity) and once round robin
   (straight to the two pod IPs, alternately). Hit rate = delta `vllm:prefix_cache_hits_total` /
   delta `vllm:prefix_cache_queries_total`, summed over both engines. The two runs use different
   texts, so neither finds the other's blocks.

   Each engine's KV cache is small (`--num-gpu-blocks-override`, 26 blocks of 128 tokens, a bit
   under the context of 4 conversations at their last turn), as a busy GPU's is: with every cache
   holding everything seen (the CPU default here is 4,096 blocks), round robin with two replicas
   still finds a conversation's older turns on "the other" engine often enough to reach ~1.3x
   below affinity and no more. Under cache pressure, affinity makes the fleet's cache the sum of
   its engines' (each holds its own 4 conversations), while round robin makes each hold all 8.
   The 8 conversations are picked so that the gateway's ring splits them 4/4 (a hash of 8 keys
   is often 6/2; thousands of conversations split evenly): Envoy's own ring (the fast path) is
   asked, one probe request per candidate before the round-robin run, whose traffic then evicts
   what the probes cached. The round-robin trace is balanced with the picker's pure function.

2. A client that leaves: a long stream through the gateway, the client closes at the headers;
   Envoy must reset the upstream request (closing the upstream connection), the engine's
   `vllm:num_requests_running` must return to 0 well before the same stream read to its end
   finished, and `vllm:generation_tokens_total` must show the engine stopped short of max_tokens.
   The tiny model decodes about a thousand tokens a second when nobody reads (the client, not the
   engine, paces a full stream), so the client leaves as soon as it has the headers. (vLLM 0.32
   does not count a client's abort in `vllm:request_success_total{finished_reason="abort"}`:
   observed, it stays 0.)

One namespace, one InferenceDeployment (2 replicas, started once: vLLM takes minutes on 2 cores).
"""

from __future__ import annotations

import json
import pathlib
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from shardwise.devcluster.processes import Process
from shardwise.gateway.decide import picker
from tests.e2e import real_engine_support as rs
from tests.e2e.support import Kubectl, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(1800)]

NAME = "tiny-pair"
SERVED = "tiny"
KV_BLOCKS = 26
CONVERSATIONS, TURNS = 8, 6
# The tiny model's byte-level BPE (trained on Python's stdlib) spends ~3.8 tokens on these words.
WORDS = ("the request engine model cache prefix token return value default import class self list dict "
         "string number buffer socket thread queue lock event timeout error handler parser stream chunk "
         "header body path file module function argument option config").split()
SYSTEM_WORDS, USER_WORDS, ASSISTANT_WORDS = 130, 10, 16  # ~500, ~40, ~60 tokens


def manifest() -> str:
    doc = {"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": NAME},
           "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedName": SERVED},
                    "serving": {"maxModelLen": 3072, "maxConcurrency": 4, "image": LOCAL_VLLM_CPU_IMAGE,
                                "extraArgs": ["--num-gpu-blocks-override", str(KV_BLOCKS)]},
                    "parallelism": {"tensor": 1, "pipeline": 1}, "placement": {"gpuProducts": ["NVIDIA-L40S"]},
                    "replicas": 2}}
    return json.dumps(doc)


class Pair:
    def __init__(self, kubectl: Kubectl, door: FrontDoor, ips: list[str], fleet: Process) -> None:
        self.kubectl, self.door, self.ips, self.fleet = kubectl, door, ips, fleet

    @property
    def endpoints(self) -> list[str]:
        return sorted(f"{ip}:8000" for ip in self.ips)


def _ready_ips(kubectl: Kubectl) -> list[str] | None:
    pods = (kubectl.get("pods", selector=f"shardwise.io/inference-deployment={NAME}") or {"items": []})["items"]
    ready = [p["status"]["podIP"] for p in pods if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    return sorted(ready) if len(ready) == 2 else None


def _gateway_endpoints(door: FrontDoor) -> float:
    for line in httpx.get(door.metrics_url, timeout=5).text.splitlines():
        if line.startswith(f'shardwise_gateway_endpoints{{model="{SERVED}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def pair(cluster: LocalCluster, operator: Any) -> Iterator[Pair]:
    home = rs.install_real_engine()
    namespace = f"gwr-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    fleet = rs.start_fleet(cluster, namespace, home)
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gw-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1)
    try:
        kubectl.apply_yaml(manifest())
        door.start()
        started = time.monotonic()
        ips = None
        for _ in rs.iter_poll(1200, 2.0):
            assert fleet.alive(), fleet.log_tail()
            if (ips := _ready_ips(kubectl)) and _gateway_endpoints(door) == 2:
                break
        else:
            raise AssertionError(f"two ready engines never appeared; fleet log:\n{fleet.log_tail()}")
        print(f"\nboth engines Ready and routed {time.monotonic() - started:.0f} s after the apply")
        yield Pair(kubectl, door, ips, fleet)
    finally:
        door.stop()
        rs.stop_fleet(fleet)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _metrics(ip: str) -> str:
    return httpx.get(f"http://{ip}:8000/metrics", timeout=10).text


def _sum(text: str, series: str, label: str = "") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(series + "{") and label in line)


def _cache_counters(pair: Pair) -> tuple[float, float]:
    texts = [_metrics(ip) for ip in pair.ips]
    return (sum(_sum(t, "vllm:prefix_cache_hits_total") for t in texts),
            sum(_sum(t, "vllm:prefix_cache_queries_total") for t in texts))


def _requests_done(ip: str) -> float:
    return _sum(_metrics(ip), "vllm:request_success_total")


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _conversation(key: str) -> dict[str, Any]:
    rng = random.Random(key)
    return {"system": f"conversation {key}: " + _words(rng, SYSTEM_WORDS),
            "users": [_words(rng, USER_WORDS) for _ in range(TURNS)],
            "assistants": [_words(rng, ASSISTANT_WORDS) for _ in range(TURNS)]}


def _messages(conv: dict[str, Any], turn: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": conv["system"]}]
    for t in range(turn):
        messages += [{"role": "user", "content": conv["users"][t]}, {"role": "assistant", "content": conv["assistants"][t]}]
    return messages + [{"role": "user", "content": conv["users"][turn]}]


def _trace(label: str, endpoints: list[str]) -> list[dict[str, Any]]:
    """CONVERSATIONS conversations the gateway's ring splits evenly over `endpoints`."""
    per_owner: dict[str, list[dict[str, Any]]] = {e: [] for e in endpoints}
    for i in range(1000):
        conv = _conversation(f"{label}-{i}")
        owner = picker.pick(endpoints, outstanding={}, stats={}, prefix=picker.prefix_of({"messages": _messages(conv, 0)}))
        if len(per_owner[owner]) < CONVERSATIONS // len(endpoints):
            per_owner[owner].append(conv)
        if sum(map(len, per_owner.values())) == CONVERSATIONS:
            return [c for convs in zip(*per_owner.values()) for c in convs]
    raise AssertionError("no balanced trace found")


def _trace_through(door: FrontDoor, ips: list[str], client: httpx.Client, label: str) -> list[dict[str, Any]]:
    """CONVERSATIONS conversations the gateway sends evenly to the engines, found by asking it:
    one probe request per candidate (its first turn, one token), counted on the engine that answered."""
    per_owner: dict[str, list[dict[str, Any]]] = {ip: [] for ip in ips}
    for i in range(200):
        conv = _conversation(f"{label}-{i}")
        before = {ip: _requests_done(ip) for ip in ips}
        _post(client, f"{door.base_url}/chat/completions", _messages(conv, 0))
        (owner,) = [ip for ip in ips if _requests_done(ip) > before[ip]]
        if len(per_owner[owner]) < CONVERSATIONS // len(ips):
            per_owner[owner].append(conv)
        if sum(map(len, per_owner.values())) == CONVERSATIONS:
            return [c for convs in zip(*per_owner.values()) for c in convs]
    raise AssertionError(f"no balanced trace found in 200 probes: {per_owner}")


def _play(trace: list[dict[str, Any]], send: Callable[[int, list[dict[str, str]]], dict[str, Any]]) -> int:
    """Turn by turn, every conversation once per round in a shuffled (seeded) order, one request at a
    time; returns the prompt tokens the engines reported."""
    order_rng = random.Random(20)
    prompt_tokens, n = 0, 0
    for turn in range(TURNS):
        order = list(range(len(trace)))
        order_rng.shuffle(order)
        for c in order:
            reply = send(n, _messages(trace[c], turn))
            prompt_tokens += reply["usage"]["prompt_tokens"]
            n += 1
    return prompt_tokens


def _hit_rate(pair: Pair, trace: list[dict[str, Any]], send: Callable[[int, list[dict[str, str]]], dict[str, Any]]
              ) -> tuple[float, dict[str, float]]:
    hits0, queries0 = _cache_counters(pair)
    done0 = {ip: _requests_done(ip) for ip in pair.ips}
    started = time.monotonic()
    prompt_tokens = _play(trace, send)
    seconds = time.monotonic() - started
    hits1, queries1 = _cache_counters(pair)
    split = {ip: _requests_done(ip) - done0[ip] for ip in pair.ips}
    return (hits1 - hits0) / (queries1 - queries0), {**split, "hits": hits1 - hits0, "queries": queries1 - queries0,
                                                     "prompt_tokens": prompt_tokens, "seconds": round(seconds, 1)}


def _post(client: httpx.Client, url: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    response = client.post(url, json={"model": SERVED, "messages": messages, "max_tokens": 1})
    assert response.status_code == 200, response.text
    return response.json()


def test_prefix_affinity_hits_at_least_twice_round_robin(pair: Pair) -> None:
    for ip in pair.ips:  # prefix caching on (vLLM V1's default), with the small cache asked for
        info = next(line for line in _metrics(ip).splitlines() if line.startswith("vllm:cache_config_info{"))
        assert 'enable_prefix_caching="True"' in info and f'num_gpu_blocks="{KV_BLOCKS}"' in info, info

    with httpx.Client(timeout=60) as client:
        affinity_trace = _trace_through(pair.door, pair.ips, client, f"af-{uuid.uuid4().hex[:6]}")
        rr_trace = _trace(f"rr-{uuid.uuid4().hex[:6]}", pair.endpoints)
        rr, rr_detail = _hit_rate(pair, rr_trace, lambda n, m: _post(
            client, f"http://{pair.ips[n % 2]}:8000/v1/chat/completions", m))
        fast_before = pair.door.envoy_counter("cluster.fast.upstream_rq_total")
        affinity, affinity_detail = _hit_rate(pair, affinity_trace, lambda n, m: _post(
            client, f"{pair.door.base_url}/chat/completions", m))
    print(f"\nprefix-cache hit rate, {CONVERSATIONS} conversations x {TURNS} turns, 2 engines x {KV_BLOCKS} blocks: "
          f"gateway (affinity) {affinity:.3f} {affinity_detail}, round robin {rr:.3f} {rr_detail}, "
          f"ratio {affinity / max(rr, 1e-9):.2f}x")
    assert affinity >= 2 * rr, (affinity, rr)
    # Envoy routed them itself (the fast path), no request through the ext_proc picker
    assert pair.door.envoy_counter("cluster.fast.upstream_rq_total") - fast_before == CONVERSATIONS * TURNS


def test_a_client_that_leaves_aborts_the_request_in_vllm(pair: Pair) -> None:
    def running() -> float:
        return sum(_sum(_metrics(ip), "vllm:num_requests_running") for ip in pair.ips)

    def generated() -> float:
        return sum(_sum(_metrics(ip), "vllm:generation_tokens_total") for ip in pair.ips)

    max_tokens = 3000  # fits the 26-block cache (3,328 tokens)
    body = {"model": SERVED, "messages": [{"role": "user", "content": "tell me everything"}], "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True}
    url = f"{pair.door.base_url}/chat/completions"
    eventually(lambda: running() == 0, timeout=30, what="both engines idle")

    # The same stream read to its end: how long the engine takes and that it makes every token.
    before, started = generated(), time.monotonic()
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        assert response.status_code == 200
        assert any(line == "data: [DONE]" for line in response.iter_lines())
    full_s = time.monotonic() - started
    eventually(lambda: generated() - before == max_tokens, timeout=10, what="the full stream's tokens counted")

    # Now the client leaves as soon as the answer's headers are in. Two things must follow. The
    # gateway's part: Envoy closes the upstream connection at once (its own counter, one per try),
    # and num_requests_running returns to 0. The engine's part: the tiny model makes its 3,000
    # tokens in a second or so unread, and on a loaded machine vLLM's API server can notice the
    # closed connection only after the engine finished (CI once showed 3 of 3 such tries): that
    # race is the engine's speed, not the gateway's, so up to five tries, at least one of which
    # must show the engine stopping well short of max_tokens (a gateway that did not abort would
    # show none, and no reset).
    def resets() -> int:
        # HTTP/1.1 cannot cancel a request but by closing its connection: Envoy's count of those.
        return sum(pair.door.envoy_counter(f"cluster.{c}.upstream_cx_destroy_local_with_active_rq")
                   for c in ("fast", "engines"))

    tries: list[tuple[float, float, int]] = []
    for _ in range(5):
        eventually(lambda: running() == 0, timeout=30, what="both engines idle")
        before, reset_before = generated(), resets()
        with httpx.stream("POST", url, json=body, timeout=60) as response:
            assert response.status_code == 200
        closed = time.monotonic()
        eventually(lambda: running() == 0, timeout=10, interval=0.02, what="vllm:num_requests_running back to 0")
        dropped_s = time.monotonic() - closed
        for _ in rs.iter_poll(10, 0.05):  # a try without a reset is recorded, not raised
            if resets() > reset_before:
                break
        # Idle now, so the counters are final for this try.
        tries.append((generated() - before, dropped_s, resets() - reset_before))
        if tries[-1][0] < max_tokens / 2:
            break
    print(f"\nfull {max_tokens}-token stream {full_s:.2f} s; the client left at the headers: "
          + "; ".join(f"{made:.0f} of {max_tokens} tokens made, idle within {s:.3f} s, {r} upstream reset"
                      for made, s, r in tries))
    # A try whose engine had made every token before the client left has nothing to reset (CI saw
    # 3,000 of 3,000 made and no reset once); every try the engine had not finished has one.
    assert all(r == 1 for made, _, r in tries if made < max_tokens), tries
    assert any(made < max_tokens / 2 and r == 1 for made, _, r in tries), tries
    assert all(s < full_s / 2 for _, s, _ in tries), (tries, full_s)
    assert pair.fleet.alive()
