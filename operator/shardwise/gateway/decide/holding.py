"""Requests held while their model wakes: bounded per model, released first in, first out.

Pure bookkeeping over tickets (ints) and times passed in, so bounds and timeouts are tested in
virtual time; the shell pairs each ticket with the waiting gRPC stream. Per model at most
`max_count` requests and `max_bytes` of bodies are held (the bodies sit in Envoy's buffers, so
the bound is the gateway's memory promise); a ticket not released by its deadline expires, and
the caller gets a 503 with Retry-After. `timeout_s` defaults to 600 s: longer than a cold start
from a cached model (minutes), so a woken model answers its first request.

`WakeLimiter` spaces the wake signal (an annotation write) to once per interval per model, so a
burst of held requests costs the API server one write.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_COUNT = 1000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Limits:
    max_count: int = DEFAULT_MAX_COUNT
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class Held:
    ticket: int
    size: int
    since: float
    deadline: float


class Holds:
    """Held tickets by model, each model's in arrival order."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self._queues: dict[str, collections.OrderedDict[int, Held]] = {}
        self._bytes: dict[str, int] = {}

    def admit(self, model: str, ticket: int, size: int, now: float) -> str | None:
        """Hold `ticket`; None when held, else why not ("count" or "bytes": the queue is full)."""
        queue = self._queues.setdefault(model, collections.OrderedDict())
        if len(queue) >= self.limits.max_count:
            return "count"
        if self._bytes.get(model, 0) + size > self.limits.max_bytes:
            return "bytes"
        queue[ticket] = Held(ticket, size, now, now + self.limits.timeout_s)
        self._bytes[model] = self._bytes.get(model, 0) + size
        return None

    def release(self, model: str) -> list[Held]:
        """Every ticket of `model`, oldest first (its endpoints are ready)."""
        queue = self._queues.pop(model, None)
        self._bytes.pop(model, None)
        return list(queue.values()) if queue else []

    def drop(self, model: str, ticket: int) -> Held | None:
        """Forget one ticket (its client left, or it was answered)."""
        queue = self._queues.get(model)
        held = queue.pop(ticket, None) if queue else None
        if held is not None:
            self._bytes[model] -= held.size
            if not queue:
                del self._queues[model]
                del self._bytes[model]
        return held

    def expire(self, now: float) -> list[tuple[str, Held]]:
        """Tickets past their deadline, removed; oldest first within each model."""
        out = []
        for model in list(self._queues):
            for held in list(self._queues[model].values()):
                if held.deadline > now:
                    break  # FIFO with one timeout: the rest are younger
                self.drop(model, held.ticket)
                out.append((model, held))
        return out

    def count(self, model: str) -> int:
        return len(self._queues.get(model) or ())

    def bytes(self, model: str) -> int:
        return self._bytes.get(model, 0)

    def models(self) -> Iterator[str]:
        return iter(list(self._queues))


class WakeLimiter:
    """At most one wake signal per model per `interval_s`."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def due(self, model: str, now: float) -> bool:
        last = self._last.get(model)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[model] = now
        return True
