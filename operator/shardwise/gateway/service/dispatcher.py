"""The gateway's live routing state and the one decision it makes per request: where to, or why not.

An asyncio object (one event loop owns it; informer threads hand it new tables through the
loop), with no I/O of its own: the shell writes the wake signal and scrapes the engines. A
request gets an endpoint from `picker`, or waits as a ticket in `holding` until its model has a
ready endpoint, its deadline passes (503) or its client leaves (the gRPC stream is cancelled and
the ticket dropped). Outstanding requests per endpoint are counted from pick to the end of the
routing stream, which Envoy keeps open for the life of the HTTP request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping

from shardwise.gateway import metrics
from shardwise.gateway.decide import holding, openai_errors, picker, routes
from shardwise.gateway.decide.openai_errors import Refusal

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, limits: holding.Limits = holding.Limits(), *, wake_interval_s: float = 5.0,
                 queue_full_retry_after_s: int = 5, timeout_retry_after_s: int = 30,
                 on_wake: Callable[[routes.Route], None] = lambda route: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.table = routes.Table(routes={})
        self.synced = asyncio.Event()
        self.outstanding: dict[str, int] = {}
        self.stats: Mapping[str, picker.EngineStats] = {}
        self.holds = holding.Holds(limits)
        self.wakes = holding.WakeLimiter(wake_interval_s)
        self.queue_full_retry_after_s = queue_full_retry_after_s
        self.timeout_retry_after_s = timeout_retry_after_s
        self._on_wake = on_wake
        self._clock = clock
        self._waiters: dict[int, asyncio.Future[Refusal | None]] = {}
        self._tickets = itertools.count(1)
        self._seq = itertools.count()
        self.closing = False

    # -- inputs from the shell --------------------------------------------------------------
    def set_table(self, table: routes.Table) -> None:
        """A new table: release the held requests of every model that now has an endpoint."""
        for gone in set(self.table.routes) - set(table.routes):
            try:
                metrics.ENDPOINTS.remove(gone)
            except KeyError:  # never set (a table built before this process started counting)
                pass
        self.table = table
        for route in table.models():
            metrics.ENDPOINTS.labels(route.model).set(len(route.endpoints))
        for model in list(self.holds.models()):
            route = table.get(model)
            if route is None or route.endpoints:  # ready, or deleted: either way, stop holding
                for held in self.holds.release(model):
                    self._resolve(held.ticket, None)
                self._update_held(model)

    def tick(self) -> None:
        """Expire held requests past their deadline and send due wake signals (every ~second)."""
        for model, held in self.holds.expire(self._clock()):
            metrics.SHED.labels(model, "503").inc()
            self._resolve(held.ticket, openai_errors.wake_timed_out(model, self.limits.timeout_s,
                                                                     self.timeout_retry_after_s))
            self._update_held(model)
        for model in list(self.holds.models()):
            self._maybe_wake(model)

    def shutdown(self) -> None:
        """Answer every held request now (503): a stopping gateway drops none silently."""
        self.closing = True
        for model in list(self.holds.models()):
            for held in self.holds.release(model):
                self._resolve(held.ticket, openai_errors.shutting_down(self.queue_full_retry_after_s))
            self._update_held(model)

    # -- the decision -----------------------------------------------------------------------
    async def choose(self, model: str, size: int, prefix: str | None,
                     subset: frozenset[str] | None = None) -> str | Refusal:
        """An endpoint (counted as outstanding until `done`) or the refusal to answer with.

        `subset`: the endpoints a GIE gateway allows for this request (its subset hint); the pick
        is among them, and none of them ready is a 503 (the endpoint-picker protocol's rule)."""
        if self.closing:
            return openai_errors.shutting_down(self.queue_full_retry_after_s)
        if not self.synced.is_set():  # never route from a cache that has not listed yet
            try:
                await asyncio.wait_for(self.synced.wait(), self.limits.timeout_s)
            except TimeoutError:
                return openai_errors.not_synced(self.timeout_retry_after_s)
        while True:
            route = self.table.get(model)
            if route is None:
                return openai_errors.model_not_found(model)
            allowed = route.endpoints if subset is None else [e for e in route.endpoints if e in subset]
            if route.endpoints and not allowed:
                return openai_errors.none_in_subset(model)
            if allowed:
                endpoint = picker.pick(allowed, outstanding=self.outstanding, stats=self.stats,
                                       prefix=prefix, seq=next(self._seq))
                self.outstanding[endpoint] = self.outstanding.get(endpoint, 0) + 1
                return endpoint
            if route.unavailable:
                return openai_errors.adapter_unavailable(model, route.unavailable)
            if not route.waking:
                return openai_errors.no_replicas(model)
            refusal = await self._hold(route, size)
            if refusal is not None:
                return refusal

    def done(self, endpoint: str) -> None:
        left = self.outstanding.get(endpoint, 0) - 1
        if left > 0:
            self.outstanding[endpoint] = left
        else:
            self.outstanding.pop(endpoint, None)

    # -- holding ----------------------------------------------------------------------------
    async def _hold(self, route: routes.Route, size: int) -> Refusal | None:
        ticket = next(self._tickets)
        full = self.holds.admit(route.model, ticket, size, self._clock())
        if full is not None:
            metrics.SHED.labels(route.model, "429").inc()
            return openai_errors.hold_queue_full(route.model, self.queue_full_retry_after_s)
        future: asyncio.Future[Refusal | None] = asyncio.get_running_loop().create_future()
        self._waiters[ticket] = future
        self._update_held(route.model)
        self._maybe_wake(route.model)  # the first held request wakes at once, not on the next tick
        try:
            return await future
        finally:  # answered, expired, or the client left (the stream was cancelled)
            self._waiters.pop(ticket, None)
            if self.holds.drop(route.model, ticket) is not None:
                self._update_held(route.model)

    def wake(self, route: routes.Route) -> None:
        """A request of a waking model answered elsewhere (spill-over) still asks for its replicas."""
        if not route.endpoints and self.wakes.due(route.model, self._clock()):
            self._on_wake(route)

    def _maybe_wake(self, model: str) -> None:
        route = self.table.get(model)
        if route is not None and not route.endpoints and self.holds.count(model) and \
                self.wakes.due(model, self._clock()):
            self._on_wake(route)

    def _resolve(self, ticket: int, result: Refusal | None) -> None:
        future = self._waiters.pop(ticket, None)
        if future is not None and not future.done():
            future.set_result(result)

    def _update_held(self, model: str) -> None:
        metrics.HELD.labels(model).set(self.holds.count(model))
