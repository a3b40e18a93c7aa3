"""Usage records out of the cluster: JSON lines on stdout and signed NDJSON webhooks (docs/usage-export.md).

The observer hands every request's Observation to `Export.__call__` on the event loop after the
request ended (Envoy's access log): the record is built there (`records.build`, pure) and
appended to each sink. Nothing here is awaited on a request's path: a webhook sink is a bounded
buffer emptied by a task of its own, so a dead or slow receiver only fills that buffer; once it
is full new records are dropped and counted (`shardwise_gateway_usage_dropped_total`).

Delivery is at least once: a batch leaves the buffer only when the receiver answered 2xx; a
failed or unanswered batch is sent again (full-jitter exponential backoff), so a receiver
deduplicates by each record's `id` (made here once per record; Envoy's `request_id` can be a
client's own). A receiver's plain refusal (a 4xx other than
408/409/425/429) would be refused again: that batch is dropped and counted (reason `rejected`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import random
import sys
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

import aiohttp
import yarl

from shardwise.gateway import metrics
from shardwise.gateway.decide import records
from shardwise.gateway.service.answered import Answered
from shardwise.gateway.service.observer import Observation
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WebhookSettings:
    url: str
    secret: bytes = b""  # empty: unsigned (the receiver cannot tell the gateway from anyone)
    buffer: int = 10000  # records held while the receiver is slow or away; beyond: dropped, counted
    batch: int = 500  # records per POST at most
    flush_interval_s: float = 1.0  # a partial batch waits at most this long
    timeout_s: float = 10.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0


class StdoutSink:
    """One JSON line per record, for the cluster's log pipeline."""

    name = "stdout"

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream

    def put(self, record: dict[str, Any]) -> None:
        stream = self.stream or sys.stdout
        stream.write(json.dumps({"usage": record}, separators=(",", ":"), sort_keys=True) + "\n")
        stream.flush()
        metrics.USAGE_EXPORTED.labels(self.name).inc()

    async def run(self) -> None:
        return None

    async def drain(self, timeout_s: float) -> None:
        return None


class WebhookSink:
    """NDJSON batches POSTed to one URL, signed, retried, from a bounded buffer."""

    def __init__(self, settings: WebhookSettings, *, rand: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        # The URL's host only: a receiver's path or query may hold a token of its own (metrics, logs).
        url = yarl.URL(settings.url)
        self.name = f"webhook:{url.host}:{url.port}"
        self.buffer: collections.deque[dict[str, Any]] = collections.deque()
        self._wake = asyncio.Event()
        self._rand, self._clock = rand, clock
        self._quiet = QuietLog(log, f"usage webhook {self.name}")
        self.delivered = 0

    def put(self, record: dict[str, Any]) -> None:
        if len(self.buffer) >= self.settings.buffer:
            metrics.USAGE_DROPPED.labels(self.name, "buffer_full").inc()
            return
        self.buffer.append(record)
        metrics.USAGE_BUFFERED.labels(self.name).set(len(self.buffer))
        if len(self.buffer) >= self.settings.batch:
            self._wake.set()

    async def run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s)) as session:
            while True:
                if len(self.buffer) < self.settings.batch:
                    try:
                        await asyncio.wait_for(self._wake.wait(), self.settings.flush_interval_s)
                    except asyncio.TimeoutError:
                        pass
                self._wake.clear()
                while self.buffer:
                    await self._deliver_one_batch(session)

    async def _deliver_one_batch(self, session: aiohttp.ClientSession) -> None:
        batch = list(self.buffer)[:self.settings.batch]
        body = records.ndjson(batch)
        attempt = 0
        while True:
            status = await self._post(session, body)
            if status is not None and 200 <= status < 300:
                self._quiet.success()
                self._taken(len(batch))
                self.delivered += len(batch)
                metrics.USAGE_EXPORTED.labels(self.name).inc(len(batch))
                return
            if not records.retryable(status):
                log.warning("usage %s refused a batch of %d records (HTTP %s): dropped",
                            self.name, len(batch), status)
                self._taken(len(batch))
                metrics.USAGE_DROPPED.labels(self.name, "rejected").inc(len(batch))
                return
            attempt += 1
            await asyncio.sleep(records.backoff_s(attempt, self._rand(), self.settings.backoff_base_s,
                                                  self.settings.backoff_cap_s))

    def _taken(self, count: int) -> None:
        for _ in range(count):
            self.buffer.popleft()
        metrics.USAGE_BUFFERED.labels(self.name).set(len(self.buffer))

    async def _post(self, session: aiohttp.ClientSession, body: bytes) -> int | None:
        headers = {"content-type": "application/x-ndjson"}
        if self.settings.secret:
            headers[records.SIGNATURE_HEADER] = records.signature(self.settings.secret, int(self._clock()), body)
        try:
            async with session.post(self.settings.url, data=body, headers=headers) as response:
                await response.read()
                if response.status >= 300:
                    self._quiet.failure(RuntimeError(f"HTTP {response.status}"))
                return response.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._quiet.failure(exc)
            return None

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: what is buffered gets one more chance, bounded."""
        if not self.buffer:
            return
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
                await asyncio.wait_for(self._drain(session), timeout_s)
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError):
            log.warning("usage %s: %d records not delivered at shutdown", self.name, len(self.buffer))

    async def _drain(self, session: aiohttp.ClientSession) -> None:
        while self.buffer:
            batch = list(self.buffer)[:self.settings.batch]
            status = await self._post(session, records.ndjson(batch))
            if status is None or status >= 300:
                return
            self._taken(len(batch))


class Export:
    """The observer's export hook: builds each request's record, hands it to every sink."""

    def __init__(self, sinks: list[Any], *, price_of: Callable[[str], float | None] = lambda m: None,
                 cost_of: Callable[[str, int, int, int], int | None] = lambda m, p, c, cached: None,
                 served_of: Callable[[str, str | None], records.Served | None] = lambda m, e: None) -> None:
        self.sinks = sinks
        self._price_of, self._cost_of, self._served_of = price_of, cost_of, served_of

    def record_of(self, seen: Observation) -> dict[str, Any]:
        prompt, completion = seen.tokens()
        charged_prompt, charged_completion = records.charged(seen.code, seen.complete, seen.streaming,
                                                             prompt, completion)
        cached = records.cached_tokens(seen.usage)
        hosted = self._cost_of(seen.model, charged_prompt, charged_completion, cached or 0)
        cost = records.cost_micro_usd(charged_completion, hosted,
                                      self._price_of(seen.model) if hosted is None else None)
        return records.build(record_id=str(uuid.uuid4()), request_id=seen.request_id, start_unix_s=seen.start_unix_s, key_id=seen.key_id,
                             model=seen.model, served=self._served_of(seen.model, seen.endpoint), code=seen.code,
                             complete=seen.complete, streaming=seen.streaming, prompt=prompt, completion=completion,
                             cached=cached, ttft_s=seen.ttft_s, duration_s=seen.e2e_s,
                             cost_micro=cost)

    def __call__(self, seen: Observation) -> None:
        self._hand(self.record_of(seen))

    def answered(self, answer: Answered) -> None:
        """A request the gateway refused itself (service/answered.py): its record, nothing charged."""
        self._hand(records.build_answered(record_id=str(uuid.uuid4()), request_id=answer.request_id,
                                          start_unix_s=answer.started_unix_s, key_id=answer.key_id,
                                          model=answer.model, status=answer.status, error_code=answer.error_code))

    def _hand(self, record: dict[str, Any]) -> None:
        for sink in self.sinks:
            try:
                sink.put(record)
            except Exception:  # noqa: BLE001 - one sink's failure leaves the others and the request alone
                metrics.USAGE_DROPPED.labels(sink.name, "sink_error").inc()
                log.exception("usage record not handed to %s", sink.name)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(sink.run()) for sink in self.sinks]

    async def drain(self, timeout_s: float = 5.0) -> None:
        await asyncio.gather(*(sink.drain(timeout_s) for sink in self.sinks))
