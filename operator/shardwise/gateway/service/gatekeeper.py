"""Who may call, and how much: authentication, quotas and usage accounting per API key.

One asyncio object per gateway process, used by the route filter (authenticate in the request
headers phase, admit after the body is read, release when the request ends) and by the observer
(charge each response's usage). The key table comes from the informers (`keys.build_table`).

The quota store is Redis when one is configured and answering (limits shared by every replica);
otherwise, and at once when a call to Redis fails, the per-replica fallback (`quota.LocalLimiter`,
each limit divided by `fallback_share`) answers, `shardwise_gateway_quota_store_up` is 0, and a
probe every second brings the shared limits back when Redis answers again. Usage that could not
reach Redis is kept here and handed in on recovery. A key without limits never touches Redis on
the request path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from shardwise.gateway import metrics
from shardwise.gateway.decide import budget, keys, openai_errors, quota
from shardwise.gateway.decide.openai_errors import Refusal
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AuthSettings:
    anonymous: bool = False  # requests without a key pass as "anonymous" (no limits)
    redis_url: str = ""  # empty: no shared store, per-replica limits only
    redis_prefix: str = "shardwise:"
    fallback_share: int = 1  # while Redis is away each replica allows limit / this (the replica count)
    redis_timeout_s: float = 0.25
    lease_ttl_s: float = 30.0
    probe_interval_s: float = 1.0
    status_interval_s: float = 10.0
    lease_namespace: str = "default"  # the status writer's Lease
    lease_name: str = "shardwise-gateway-keys"


@dataclasses.dataclass(frozen=True)
class Ticket:
    key: keys.Key
    lease: str
    shared: bool  # admitted by Redis (release there) or by the local fallback


class Gatekeeper:
    def __init__(self, settings: AuthSettings, *, price_of: Callable[[str], float | None] = lambda m: None,
                 store: Any = None, clock: Callable[[], float] = time.monotonic,
                 cost_of: Callable[[str, int, int, int], int | None] = lambda m, p, c, cached: None,
                 wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        self.settings = settings
        self.table = keys.KeyTable(by_hash={}, problems={})
        self._by_id: dict[str, keys.Key] = {}
        self.on_table: Callable[[], None] | None = None  # called on the event loop after each new table
        self.store = store
        if store is None and settings.redis_url:
            from shardwise.gateway.service.quotastore import RedisQuota  # redis-py only where it is used

            self.store = RedisQuota(settings.redis_url, prefix=settings.redis_prefix,
                                    timeout_s=settings.redis_timeout_s, lease_ttl_s=settings.lease_ttl_s)
        self.store_up = self.store is not None
        metrics.QUOTA_STORE_UP.set(1 if self.store_up else 0)
        self.local = quota.LocalLimiter(settings.fallback_share)
        self.pending: dict[str, quota.Usage] = {}  # usage Redis has not got yet (all of it without Redis)
        self.in_flight: dict[str, Ticket] = {}
        self._price_of = price_of
        # micro-USD of a response at a hosted provider's prices (prompt, completion, cached prompt), None: not hosted
        self._cost_of = cost_of
        self._clock = clock
        self._wall = wall
        # key id -> (period start, micro-USD) this replica charged a key with a budget in that period
        self.spend: dict[str, tuple[str, int]] = {}
        self._leases = itertools.count(1)
        self._lease_prefix = f"{os.getpid()}-{time.time_ns() % 10**9}-"
        self._tasks: set[asyncio.Task[None]] = set()
        self._store_log = QuietLog(log, "quota store (Redis)")

    # -- keys -------------------------------------------------------------------------------
    def set_table(self, table: keys.KeyTable) -> None:
        self.table = table
        self._by_id = {k.id: k for k in table.by_hash.values()}
        if self.on_table is not None:  # Envoy's copy (the keyed fast path) follows within the event
            self.on_table()

    def authenticate(self, authorization: str | None) -> keys.Key | Refusal:
        token = keys.bearer(authorization)
        if token is None:
            if self.settings.anonymous and not authorization:
                return keys.Key(id=keys.ANONYMOUS, models=frozenset())
            return openai_errors.missing_api_key() if not authorization else openai_errors.invalid_api_key()
        key = self.table.lookup(token)
        return key if key is not None else openai_errors.invalid_api_key()

    def visible(self, key: keys.Key | None, models: list[Any]) -> list[Any]:
        return [r for r in models if key is None or key.allows(r.model)]

    # -- quotas -----------------------------------------------------------------------------
    async def admit(self, key: keys.Key) -> Ticket | Refusal:
        lease = f"{self._lease_prefix}{next(self._leases)}"
        if key.budget is not None:
            spent, now = self.spent(key), self._wall()
            if budget.over(key.budget, spent):
                metrics.RATE_LIMITED.labels(key.id, "budget").inc()
                self.pending.setdefault(key.id, quota.Usage()).limited += 1
                return budget.refusal(key.id, key.budget, spent, now)
        if not key.limited:
            return Ticket(key, lease, shared=False)
        started = time.perf_counter()
        verdict: quota.Verdict | None = None
        shared = False
        if self.store is not None and self.store_up:
            try:
                verdict = await self.store.admit(key, lease)
                shared = True
            except Exception as exc:  # noqa: BLE001 - any failure: fall back now, probe for recovery
                self._down(exc)
        if verdict is None:
            verdict = self.local.admit(key, self._clock())
            if not verdict.allowed:
                self.pending.setdefault(key.id, quota.Usage()).limited += 1
        metrics.QUOTA_CHECK.observe(time.perf_counter() - started)
        if not verdict.allowed:
            metrics.RATE_LIMITED.labels(key.id, verdict.kind).inc()
            limit = {quota.REQUESTS: key.requests_per_minute, quota.TOKENS: key.tokens_per_minute,
                     quota.CONCURRENCY: key.max_concurrent}.get(verdict.kind)
            return openai_errors.over_quota(key.id, verdict.kind, limit, verdict.retry_after_s)
        ticket = Ticket(key, lease, shared)
        if key.max_concurrent is not None:
            self.in_flight[lease] = ticket
        return ticket

    def spent(self, key: keys.Key, start: str | None = None) -> int:
        """Micro-USD the key spent in the current period: this replica's count, or the status's where
        it is higher (usage other replicas handed in, or from before this process started)."""
        assert key.budget is not None
        start = start or budget.stamp(budget.bounds(self._wall(), key.budget.period)[0])
        return max(budget.spent_in(start, *self.spend.get(key.id, (None, 0))),
                   budget.spent_in(start, key.spent_period, key.spent_micro))

    def release(self, ticket: Ticket) -> None:
        if self.in_flight.pop(ticket.lease, None) is None:
            return
        if ticket.shared:
            self._spawn(self._release_shared(ticket))
        else:
            self.local.release(ticket.key)

    async def _release_shared(self, ticket: Ticket) -> None:
        try:
            await self.store.release(ticket.key, ticket.lease)
        except Exception as exc:  # noqa: BLE001 - the lease expires on its own
            self._down(exc)

    # -- usage ------------------------------------------------------------------------------
    def charge(self, key_id: str, model: str, prompt: int | None, completion: int | None, *, cached: int = 0) -> None:
        """A response's usage (from the observer): metrics now, the tokens bucket and the key's
        counters in Redis (or kept here until it is back)."""
        prompt, completion = prompt or 0, completion or 0
        hosted = self._cost_of(model, prompt, completion, cached)
        price = self._price_of(model) if hosted is None else None
        cost_micro = hosted if hosted is not None else round(completion * price) if price else 0  # $/1M x tokens
        metrics.KEY_TOKENS.labels(key_id, "prompt").inc(prompt)
        metrics.KEY_TOKENS.labels(key_id, "completion").inc(completion)
        if cost_micro:
            metrics.KEY_COST.labels(key_id).inc(cost_micro / 1e6)
        usage = quota.Usage(requests=1, prompt=prompt, completion=completion, cost_micro_usd=cost_micro)
        key = self._by_id.get(key_id) or keys.Key(id=key_id, models=frozenset())
        if key.budget is not None and cost_micro:
            start = budget.stamp(budget.bounds(self._wall(), key.budget.period)[0])
            self.spend[key_id] = (start, self.spent(key, start) + cost_micro)
        # A key without a tokens limit has no bucket to charge at once: its usage joins what is
        # handed in with the next probe (one pipelined round trip a second for every such key,
        # not a script per response: the keyed fast path's share of the service's CPU).
        if self.store is not None and self.store_up and key.tokens_per_minute is not None:
            self._spawn(self._charge_shared(key, prompt + completion, usage))
        else:
            self.local.charge(key, prompt + completion, self._clock())
            self.pending.setdefault(key_id, quota.Usage()).add(usage)

    async def _charge_shared(self, key: keys.Key, tokens: int, usage: quota.Usage) -> None:
        try:
            await self.store.charge(key, tokens, usage)
        except Exception as exc:  # noqa: BLE001
            self._down(exc)
            self.local.charge(key, tokens, self._clock())
            self.pending.setdefault(key.id, quota.Usage()).add(usage)

    def take_pending(self) -> dict[str, quota.Usage]:
        taken, self.pending = self.pending, {}
        return taken

    # -- the store's health -----------------------------------------------------------------
    def _down(self, exc: BaseException) -> None:
        if self.store_up:
            log.warning("quota store unreachable (%s): per-replica limits (1/%d of each) until it answers",
                        type(exc).__name__, self.settings.fallback_share)
        self.store_up = False
        metrics.QUOTA_STORE_UP.set(0)
        self._store_log.failure(exc)

    async def watch_store(self) -> None:
        """Ping the store every probe interval; on recovery hand in the usage counted meanwhile; renew leases."""
        if self.store is None:
            return
        renew_every = max(1.0, self.settings.lease_ttl_s / 3)
        last_renew = self._clock()
        while True:
            await asyncio.sleep(self.settings.probe_interval_s)
            try:  # also while up: a Redis gone is noticed without waiting for a request to fail
                await self.store.ping()
            except Exception as exc:  # noqa: BLE001
                self._down(exc)
                continue
            if not self.store_up:
                await self.store.reset()
                self._store_log.success()
                log.info("quota store answers again: shared limits resume")
                self.local = quota.LocalLimiter(self.settings.fallback_share)
                self.store_up = True
                metrics.QUOTA_STORE_UP.set(1)
            if self.pending and self.store_up:
                pending = self.take_pending()
                try:
                    await self.store.add_usage(pending)
                except Exception as exc:  # noqa: BLE001
                    for key_id, usage in pending.items():
                        self.pending.setdefault(key_id, quota.Usage()).add(usage)
                    self._down(exc)
            if self._clock() - last_renew >= renew_every and self.store_up:
                last_renew = self._clock()
                try:
                    await self.store.renew([(t.key, t.lease) for t in self.in_flight.values() if t.shared])
                except Exception as exc:  # noqa: BLE001
                    self._down(exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
