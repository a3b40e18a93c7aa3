"""Quota arithmetic: token buckets per key and what a refusal tells the caller (pure).

Two buckets per key, both holding one minute's worth and refilling at limit/60 per second:
- requests: a request takes 1 and needs 1 (Retry-After = time to refill to 1);
- tokens: a request needs the level above 0 (its size is unknown until the response's usage),
  and the response's prompt + completion tokens are taken after it, so the level may go below 0
  (Retry-After = time to refill to 1). This is usage-based limiting: one request may overdraw
  the minute, and the next waits for it.
Concurrency is a count of leases in flight.

The same arithmetic runs in Redis (quotastore.py's Lua, shared by every replica) and here, for
the per-replica fallback while Redis is away (`LocalLimiter`, each limit divided by `share`, the
number of replicas, so the replicas together stay near the limit when load is spread over them).
"""

from __future__ import annotations

import dataclasses
import math

from shardwise.gateway.decide import keys

REQUESTS, TOKENS, CONCURRENCY = "requests", "tokens", "concurrency"
WINDOW_S = 60.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    allowed: bool
    kind: str = ""  # which limit refused
    retry_after_s: int = 0


ALLOWED = Verdict(True)


def refill(level: float, at: float, now: float, capacity: float) -> float:
    """The bucket's level at `now` (capped at its capacity), from `level` at time `at`."""
    return min(capacity, level + max(0.0, now - at) * capacity / WINDOW_S)


def retry_after_s(deficit: float, capacity: float) -> int:
    """Whole seconds to refill `deficit` units at capacity/60 per second; at least 1."""
    return max(1, math.ceil(deficit * WINDOW_S / capacity - 1e-9))


def share_of(limit: int, share: int) -> int:
    """One replica's part of a limit while the replicas cannot agree (never below 1)."""
    return max(1, limit // max(1, share))


@dataclasses.dataclass
class _Bucket:
    level: float
    at: float


class LocalLimiter:
    """The fallback: the same buckets in this process's memory, each limit divided by `share`."""

    def __init__(self, share: int = 1) -> None:
        self.share = max(1, share)
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._in_flight: dict[str, int] = {}

    def _level(self, key_id: str, kind: str, capacity: float, now: float) -> _Bucket:
        bucket = self._buckets.get((key_id, kind))
        if bucket is None:
            bucket = self._buckets[(key_id, kind)] = _Bucket(capacity, now)
        bucket.level, bucket.at = refill(bucket.level, bucket.at, now, capacity), now
        return bucket

    def admit(self, key: keys.Key, now: float) -> Verdict:
        if key.max_concurrent is not None and \
                self._in_flight.get(key.id, 0) >= share_of(key.max_concurrent, self.share):
            return Verdict(False, CONCURRENCY, 1)
        requests = None
        if key.requests_per_minute is not None:
            capacity = share_of(key.requests_per_minute, self.share)
            requests = self._level(key.id, REQUESTS, capacity, now)
            if requests.level < 1:
                return Verdict(False, REQUESTS, retry_after_s(1 - requests.level, capacity))
        if key.tokens_per_minute is not None:
            capacity = share_of(key.tokens_per_minute, self.share)
            tokens = self._level(key.id, TOKENS, capacity, now)
            if tokens.level <= 0:
                return Verdict(False, TOKENS, retry_after_s(1 - tokens.level, capacity))
        if requests is not None:
            requests.level -= 1
        if key.max_concurrent is not None:
            self._in_flight[key.id] = self._in_flight.get(key.id, 0) + 1
        return ALLOWED

    def release(self, key: keys.Key) -> None:
        if key.max_concurrent is None:
            return
        left = self._in_flight.get(key.id, 0) - 1
        if left > 0:
            self._in_flight[key.id] = left
        else:
            self._in_flight.pop(key.id, None)

    def charge(self, key: keys.Key, tokens: int, now: float) -> None:
        if key.tokens_per_minute is not None and tokens > 0:
            self._level(key.id, TOKENS, share_of(key.tokens_per_minute, self.share), now).level -= tokens


@dataclasses.dataclass
class Usage:
    """Usage counted since the status writer last took it (cost in micro-USD: integer sums)."""

    requests: int = 0
    prompt: int = 0
    completion: int = 0
    cost_micro_usd: int = 0
    limited: int = 0

    def add(self, other: "Usage") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def __bool__(self) -> bool:
        return any(dataclasses.astuple(self))

    def as_fields(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v}

    @classmethod
    def from_fields(cls, fields: dict[str, str | bytes | int]) -> "Usage":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in fields.items()
                      if (k.decode() if isinstance(k, bytes) else k) in names})
