"""Event webhooks (issue 43): transitions found by `decide/events.py`, delivered by the usage sinks' machinery.

Each `--event-webhook` URL gets a `WebhookSink` of its own (signed NDJSON, bounded buffer,
at-least-once with full-jitter retries, drops counted under `sink="events:HOST:PORT"`). A loop
takes a snapshot of its sources every `interval_s` (the informers' caches, the key table, this
replica's minute of key use) and hands each new transition to every sink, once.

Quota use is what this replica saw in the last minute (requests answered for a key, and their
tokens) plus the shared limiter's own word: a key's 429 for its requests or tokens is 100 % of
that quota, whichever replica refused it. With several replicas and no refusal yet, the 80 %
event comes from one replica's share of the traffic (docs/usage-export.md, "not done yet").
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yarl

from shardwise.gateway.decide import events, keys
from shardwise.gateway.service.answered import Answered
from shardwise.gateway.service.export import WebhookSettings, WebhookSink

log = logging.getLogger(__name__)

QUOTAS = {"requests": "requests_per_minute", "tokens": "tokens_per_minute"}


class EventSink(WebhookSink):
    """A usage webhook sink under its own name: its buffer, metrics and log lines are the events'."""

    def __init__(self, settings: WebhookSettings, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        url = yarl.URL(settings.url)
        self.name = f"events:{url.host}:{url.port}"


class MinuteUse:
    """Requests and tokens per key over the last minute, as this replica saw them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, collections.deque[tuple[float, int]]] = {}
        self.refused: dict[tuple[str, str], float] = {}  # (key, quota) -> when the limiter last said 429

    def note(self, key_id: str | None, tokens: int) -> None:
        if key_id:
            self._seen.setdefault(key_id, collections.deque()).append((self._clock(), tokens))

    def note_refusal(self, answer: Answered) -> None:
        """A key's own 429 (service/answered.py): the limiter found that quota used up."""
        if answer.status == 429 and answer.key_id and answer.error_code == "rate_limit_exceeded":
            if answer.error_kind in QUOTAS:
                self.refused[(answer.key_id, answer.error_kind)] = self._clock()

    def uses(self, table: Mapping[str, keys.Key]) -> list[events.QuotaUse]:
        now = self._clock()
        out: list[events.QuotaUse] = []
        for key_id, key in sorted(table.items()):
            seen = self._seen.get(key_id, collections.deque())
            while seen and seen[0][0] < now - 60:
                seen.popleft()
            if not seen:
                self._seen.pop(key_id, None)
            for kind, limit, used in (("requests", key.requests_per_minute, len(seen)),
                                      ("tokens", key.tokens_per_minute, sum(t for _, t in seen))):
                if limit is None:
                    continue
                if now - self.refused.get((key_id, kind), -1e18) < 60:
                    used = max(used, limit)  # the shared limiter's word beats this replica's share
                out.append(events.QuotaUse(key_id, QUOTAS[kind], used, limit))
        return out


class Events:
    """The transitions' state and the sinks; `poll` once per interval (`run`)."""

    def __init__(self, sinks: list[WebhookSink], *, deployments: Callable[[], list[Any]] = list,
                 providers: Callable[[], list[Any]] | None = None,
                 key_versions: Callable[[], dict[str, str]] | None = None,
                 key_table: Callable[[], Mapping[str, keys.Key]] | None = None,
                 interval_s: float = 2.0, clock: Callable[[], float] = time.time) -> None:
        self.sinks = sinks
        self._deployments, self._providers = deployments, providers
        self._key_versions, self._key_table = key_versions, key_table
        self.interval_s, self._clock = interval_s, clock
        self.use = MinuteUse()
        self._quota: dict[tuple[str, str], int] = {}
        self._keys: dict[str, str] | None = None
        self._health: dict[str, tuple[str, str]] = {}
        self._slo: dict[str, tuple[str, str]] | None = None

    def poll(self) -> list[dict[str, Any]]:
        now = self._clock()
        found: list[dict[str, Any]] = []
        slo = events.slo_states(self._deployments())
        found += events.slo_events(self._slo or {}, slo, now, first_sight=self._slo is None)
        self._slo = slo
        if self._providers is not None:
            health = events.provider_health(self._providers())
            found += events.provider_events(self._health, health, now)
            self._health = health
        if self._key_versions is not None:
            versions = self._key_versions()
            if self._keys is not None:
                found += events.revoked_events(self._keys, versions, now)
            self._keys = versions
        if self._key_table is not None:
            quota_events, self._quota = events.quota_events(self._quota, self.use.uses(self._key_table()), now)
            found += quota_events
        for event in found:
            for sink in self.sinks:
                sink.put(event)
        return found

    async def run(self) -> None:
        while True:
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - one odd object must not end the events for good
                log.exception("event webhooks: a round failed")
            await asyncio.sleep(self.interval_s)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.run())] + [asyncio.create_task(s.run()) for s in self.sinks]

    async def drain(self, timeout_s: float = 5.0) -> None:
        await asyncio.gather(*(sink.drain(timeout_s) for sink in self.sinks))


def key_versions(apikeys: Iterable[Any], usable: Iterable[str]) -> dict[str, str]:
    """Usable key ids -> their APIKey's resourceVersion (a recreated key revoked again is a new event)."""
    ids = set(usable)
    out: dict[str, str] = {}
    for obj in apikeys:
        meta = obj.get("metadata") or {}
        ident = f"{meta.get('namespace')}/{meta.get('name')}"
        if ident in ids:
            out[ident] = str(meta.get("resourceVersion") or "")
    return {i: out.get(i, "") for i in ids}


def observe_hook(export: Any, feed: Events | None) -> Callable[[Any], None] | None:
    """The observer's hook: the usage record and this replica's minute of key use, either or both."""
    if feed is None:
        return export

    def hook(seen: Any) -> None:
        if seen.key_id and seen.code.startswith("2"):
            prompt, completion = seen.tokens()
            feed.use.note(seen.key_id, (prompt or 0) + (completion or 0))
        elif seen.key_id:
            feed.use.note(seen.key_id, 0)
        if export is not None:
            export(seen)
    return hook


def answered_hook(export: Any, feed: Events | None) -> Callable[[Answered], None] | None:
    """ext_proc's hook for its own answers: their usage records, and a key's 429 as 100 % of its quota."""
    if feed is None:
        return export.answered if export is not None else None

    def hook(answer: Answered) -> None:
        feed.use.note_refusal(answer)
        if export is not None:
            export.answered(answer)
    return hook
