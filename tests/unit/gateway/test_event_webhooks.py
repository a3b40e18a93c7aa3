"""Event webhooks (issue 43): one event per transition, none on repeat (decide/events.py), and a
real local receiver gets them signed, retried through a 503 (service/events.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from shardwise.gateway.decide import events, keys, openai_errors, records
from shardwise.gateway.service import answered
from shardwise.gateway.service.events import EventSink, Events, key_versions
from shardwise.gateway.service.export import WebhookSettings

NOW = 1780000000.0
SECRET = b"whsec-events"


def _use(used: float, limit: float = 100, quota: str = "requests_per_minute") -> list[events.QuotaUse]:
    return [events.QuotaUse("team/k", quota, used, limit)]


def test_a_quota_climb_is_one_event_per_threshold_and_none_on_repeat() -> None:
    state: dict[tuple[str, str], int] = {}
    told: list[int] = []
    for used in (10, 79, 80, 85, 95, 100, 120, 100, 90):
        found, state = events.quota_events(state, _use(used), NOW)
        told += [e["data"]["percent"] for e in found]
    assert told == [80, 100]
    # Back below 80 %: re-armed; the next climb is a new transition with a new id (another minute).
    found, state = events.quota_events(state, _use(50), NOW)
    assert found == [] and state == {}
    first, _ = events.quota_events({}, _use(81), NOW)
    again, _ = events.quota_events({}, _use(81), NOW + 120)
    assert first[0]["id"] != again[0]["id"]
    # Straight past both thresholds: the 100 only.
    found, _ = events.quota_events({}, _use(130), NOW)
    assert [(e["type"], e["subject"], e["data"]["percent"], e["data"]["quota"]) for e in found] == [
        (events.KEY_QUOTA, "team/k", 100, "requests_per_minute")]
    # No limit: no level, no event.
    assert events.quota_events({}, _use(10**6, limit=0), NOW)[0] == []


def test_two_quotas_of_one_key_are_told_apart() -> None:
    uses = _use(90) + _use(90, quota="tokens_per_minute")
    found, state = events.quota_events({}, uses, NOW)
    assert sorted(e["data"]["quota"] for e in found) == ["requests_per_minute", "tokens_per_minute"]
    assert len({e["id"] for e in found}) == 2
    assert events.quota_events(state, uses, NOW)[0] == []


def test_a_revoked_key_once() -> None:
    before = {"team/a": "10", "team/b": "11"}
    found = events.revoked_events(before, {"team/a": "12"}, NOW)
    assert [(e["type"], e["subject"]) for e in found] == [(events.KEY_REVOKED, "team/b")]
    assert events.revoked_events({"team/a": "12"}, {"team/a": "12"}, NOW) == []
    # the same key recreated and revoked again: another event id
    assert events.revoked_events({"team/b": "40"}, {}, NOW)[0]["id"] != found[0]["id"]


def _provider(status: str, since: str, name: str = "openai") -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": name},
            "status": {"conditions": [{"type": "Reachable", "status": status, "lastTransitionTime": since}]}}


def test_a_provider_going_unhealthy_and_back_once_each() -> None:
    seen: dict[str, tuple[str, str]] = {}
    kinds: list[str] = []
    for status, since in (("True", "t0"), ("True", "t0"), ("False", "t1"), ("False", "t1"), ("True", "t2"),
                          ("True", "t2")):
        now = events.provider_health([_provider(status, since)])
        kinds += [e["type"] for e in events.provider_events(seen, now, NOW)]
        seen = now
    assert kinds == [events.PROVIDER_UNHEALTHY, events.PROVIDER_HEALTHY]
    # The id is the transition's, so two replicas that saw it send the same one.
    one = events.provider_events({}, events.provider_health([_provider("False", "t1")]), NOW)
    two = events.provider_events({"team/openai": ("True", "t0")}, events.provider_health([_provider("False", "t1")]),
                                 NOW + 5)
    assert one[0]["id"] == two[0]["id"]


def _deployment(state: str | None, rv: str = "1") -> dict[str, Any]:
    figures = {"slo": {"status": state, "reason": "r", "message": ""}} if state is not None else {}
    return {"metadata": {"namespace": "team", "name": "llama", "resourceVersion": rv}, "console": figures}


def test_an_slo_state_change_once_and_a_restart_is_no_change() -> None:
    seen: dict[str, tuple[str, str]] | None = None
    states: list[tuple[str, str]] = []
    for status in ("True", "True", "False", "False", "Unknown", "True"):
        now = events.slo_states([_deployment(status)])
        states += [(e["data"]["previous"], e["data"]["state"])
                   for e in events.slo_events(seen or {}, now, NOW, first_sight=seen is None)]
        seen = now
    assert states == [("met", "missed"), ("missed", "unknown"), ("unknown", "met")]
    # From the condition itself as well as from the console's figures
    obj = {"metadata": {"namespace": "n", "name": "d"}, "status": {"conditions": [
        {"type": "SLOMet", "status": "False", "lastTransitionTime": "t9"}]}}
    assert events.slo_states([obj]) == {"n/d": ("missed", "t9")}
    assert events.slo_states([_deployment(None)]) == {}


def test_a_keys_429_is_100_percent_whatever_this_replica_saw() -> None:
    feed = Events([], key_table=lambda: {"team/k": keys.Key(id="team/k", models=frozenset(), requests_per_minute=1000)},
                  clock=lambda: NOW)
    refusal = openai_errors.over_quota("team/k", "requests", 1000, 3)
    answer = answered.Answered(request_id="r", started_unix_s=None, key_id="team/k", model="m", status=429,
                               error_code="rate_limit_exceeded", details="shardwise_refused",
                               error_kind=answered.error_code_of(refusal.body, "type"))
    feed.use.note("team/k", 10)
    assert feed.poll() == []
    feed.use.note_refusal(answer)
    found = feed.poll()
    assert [(e["type"], e["data"]["percent"], e["data"]["quota"]) for e in found] == [
        (events.KEY_QUOTA, 100, "requests_per_minute")]
    assert feed.poll() == []


def test_key_versions_keep_only_usable_keys() -> None:
    apikeys = [{"metadata": {"namespace": "team", "name": "a", "resourceVersion": "7"}},
               {"metadata": {"namespace": "team", "name": "gone", "resourceVersion": "8"}}]
    assert key_versions(apikeys, ["team/a"]) == {"team/a": "7"}


def test_a_real_receiver_gets_each_transition_once_signed_through_a_503() -> None:
    async def scenario() -> list[bytes]:
        bodies: list[bytes] = []
        failures = {"left": 2}

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            if failures["left"]:
                failures["left"] -= 1
                return web.Response(status=503)
            assert records.verify(SECRET, request.headers.get(records.SIGNATURE_HEADER, ""), body, int(time.time()))
            bodies.append(body)
            return web.Response(status=200)

        app = web.Application()
        app.router.add_post("/events", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/events"
        sink = EventSink(WebhookSettings(url, secret=SECRET, flush_interval_s=0.05, backoff_base_s=0.02,
                                         backoff_cap_s=0.1))
        assert sink.name.startswith("events:127.0.0.1:")
        state = {"providers": [_provider("True", "t0")], "keys": {"team/a": "1", "team/b": "2"},
                 "deployments": [_deployment("True")]}
        feed = Events([sink], deployments=lambda: state["deployments"], providers=lambda: state["providers"],
                      key_versions=lambda: state["keys"])
        tasks = feed.tasks()
        try:
            feed.poll()  # the first look: nothing changed yet
            state.update(providers=[_provider("False", "t1")], keys={"team/a": "1"},
                         deployments=[_deployment("False", "2")])
            feed.poll()
            feed.poll()  # the same again: nothing new
            deadline = time.monotonic() + 30
            while sum(len(b.splitlines()) for b in bodies) < 3 or sink.buffer:
                assert time.monotonic() < deadline, bodies
                await asyncio.sleep(0.05)
        finally:
            for task in tasks:
                task.cancel()
            await runner.cleanup()
        return bodies

    bodies = asyncio.run(scenario())
    got = [json.loads(line) for body in bodies for line in body.splitlines()]
    assert sorted((e["type"], e["subject"]) for e in got) == [
        (events.DEPLOYMENT_SLO, "team/llama"), (events.KEY_REVOKED, "team/b"),
        (events.PROVIDER_UNHEALTHY, "team/openai")]
    assert len({e["id"] for e in got}) == 3 and all(e["version"] == events.EVENT_SCHEMA_VERSION for e in got)
