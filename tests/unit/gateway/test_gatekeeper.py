"""The gatekeeper without a cluster: authentication, the Redis-or-fallback switch, refusal shapes."""

import asyncio
import json

from shardwise.gateway.decide import keys, openai_errors, quota, requests
from shardwise.gateway.service import gatekeeper


class BrokenStore:
    def __init__(self):
        self.calls = 0

    async def admit(self, key, lease):
        self.calls += 1
        raise ConnectionError("redis is away")


def table(**spec):
    secret = keys.slim_secret({"metadata": {"name": "s", "namespace": "n"}, "data": {"key": "c2stMQ=="}})  # sk-1
    return keys.build_table([{"metadata": {"name": "k", "namespace": "n"}, "spec": {"secretName": "s", **spec}}],
                            [secret])


def test_authenticate():
    gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings())
    gate.set_table(table())
    assert gate.authenticate("Bearer sk-1").id == "n/k"
    assert gate.authenticate(None).error["code"] == "invalid_api_key"
    assert gate.authenticate("Bearer sk-2").error["message"] == "Incorrect API key provided."
    anonymous = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(anonymous=True))
    assert anonymous.authenticate(None).id == keys.ANONYMOUS
    assert anonymous.authenticate("Bearer wrong").status == 401


def test_a_failing_store_falls_back_to_the_replicas_share():
    store = BrokenStore()
    gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(fallback_share=2), store=store, clock=lambda: 0.0)
    key = table(requestsPerMinute=4).lookup("sk-1")

    async def run():
        return [await gate.admit(key) for _ in range(3)]
    results = asyncio.run(run())
    assert store.calls == 1 and not gate.store_up  # down after the first failure: no more waiting on it
    assert [isinstance(r, gatekeeper.Ticket) for r in results] == [True, True, False]
    refusal = results[2]
    assert refusal.status == 429 and dict(refusal.headers)["retry-after"] == "30"
    assert refusal.error["type"] == "requests" and refusal.error["code"] == "rate_limit_exceeded"
    assert gate.pending["n/k"].limited == 1


def test_unlimited_keys_never_touch_the_store():
    store = BrokenStore()
    gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(), store=store)
    assert isinstance(asyncio.run(gate.admit(table().lookup("sk-1"))), gatekeeper.Ticket) and store.calls == 0


class RecordingStore:
    def __init__(self):
        self.charged, self.handed_in = [], []

    async def charge(self, key, tokens, usage):
        self.charged.append((key.id, tokens))

    async def add_usage(self, usage):
        self.handed_in.append({k: v.as_fields() for k, v in usage.items()})

    async def ping(self):
        return True


def test_usage_without_a_tokens_limit_is_handed_in_batched_and_with_one_charged_at_once():
    store = RecordingStore()
    gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(probe_interval_s=0.01), store=store)
    gate.set_table(table(requestsPerMinute=60))  # a requests limit: no tokens bucket to charge

    async def run():
        for _ in range(3):
            gate.charge("n/k", "m", 5, 7)
        assert store.charged == [] and gate.pending["n/k"].requests == 3
        watch = asyncio.create_task(gate.watch_store())
        for _ in range(500):
            if store.handed_in:
                break
            await asyncio.sleep(0.01)
        watch.cancel()
        gate.set_table(table(tokensPerMinute=600))
        gate.charge("n/k", "m", 5, 7)
        await asyncio.sleep(0)
    asyncio.run(run())
    (handed,) = store.handed_in  # one hand-in for the three responses, counted once
    assert handed["n/k"]["requests"] == 3 and handed["n/k"]["completion"] == 21 and not gate.pending
    assert store.charged == [("n/k", 12)]  # a tokens limit: its bucket is charged at once, as before


def test_streams_are_asked_for_their_usage():
    body = {"model": "m", "stream": True, "messages": []}
    assert json.loads(requests.with_stream_usage("/v1/chat/completions", body))["stream_options"] == {
        "include_usage": True}
    kept = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    assert requests.with_stream_usage("/v1/completions", kept) is None
    assert requests.with_stream_usage("/v1/completions", {"model": "m"}) is None
    assert requests.with_stream_usage("/v1/embeddings", body) is None


def test_refusals_in_openai_words():
    assert openai_errors.model_not_allowed("m").status == 404
    assert openai_errors.over_quota("n/k", quota.TOKENS, 10, 3).error["type"] == "tokens"
