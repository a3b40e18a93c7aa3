"""A keyed work queue with client-go's semantics (util/workqueue), for threads.

- `add(key)`: a key waiting in the queue is not added twice (enqueues collapse into one);
- a key being processed is never handed to a second worker: if it is added meanwhile, it is
  marked dirty and queued again when `done(key)` is called, so the change is not lost;
- `add_after(key, delay)` schedules an add (one pending per key: the soonest); `add_rate_limited(key)` schedules it after the key's
  own exponential backoff (base * 2^failures, capped, with jitter), `forget(key)` resets that;
- priorities, as controller-runtime's priority queue: a higher one is handed out first, FIFO
  within one; adding a waiting key with a higher priority raises it, never lowers it. The manager
  puts work that finishes a resource (a child's status moved) before new resources, and bulk
  re-enqueues (startup, resync) after both, so readiness never waits behind a backlog of creations.

One condition variable guards everything; it is never held while a caller does any I/O.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Priorities the manager uses; any int works, higher first.
LOW, NORMAL, HIGH = -1, 0, 1


class Backoff(Generic[K]):
    """Per-key exponential backoff: client-go's ItemExponentialFailureRateLimiter plus jitter."""

    # The base is 0.1 s, not client-go's 5 ms: that default leans on a global token bucket we do
    # not have, and without one the first retries of a failing key run back to back ("0.0 s").
    def __init__(self, base: float = 0.1, cap: float = 300.0, jitter: float = 0.1,
                 rand: Callable[[], float] = random.random) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self._failures: dict[K, int] = {}
        self._rand = rand
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.cap, self.base * (2 ** min(failures, 62)))
        return delay * (1 + self.jitter * self._rand())

    def failures(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)


class ShutDown(Exception):
    """`get` on a queue that was shut down."""


class WorkQueue(Generic[K]):
    def __init__(self, backoff: Backoff[K] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff: Backoff[K] = backoff or Backoff()
        self._clock = clock
        self._cond = threading.Condition()
        # Waiting keys and their priority: queued, or re-added while processing (then queued on `done`).
        self._dirty: dict[K, int] = {}
        self._processing: set[K] = set()
        # Heap of (-priority, seq, key). Raising a key's priority pushes a second entry; entries that
        # no longer match `_dirty` (or whose key is being processed) are skipped when popped.
        self._ready: list[tuple[int, int, K]] = []
        self._delayed: list[tuple[float, int, K, int]] = []  # heap of (due, seq, key, priority)
        # Each key's one pending delayed add, as client-go's delaying queue keeps it: a later
        # `add_after` of a waiting key changes nothing unless it is due sooner (or higher), so a
        # burst of delayed adds is one add. Heap entries that no longer match are skipped.
        self._delayed_due: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._shutdown = False
        self.adds = 0  # every add call, collapsed or not (for metrics and tests)

    # -- producers ---------------------------------------------------------------------------
    def add(self, key: K, priority: int = NORMAL) -> None:
        with self._cond:
            self.adds += 1
            if not self._shutdown:
                self._add(key, priority)

    def add_after(self, key: K, delay: float, priority: int = NORMAL) -> None:
        if delay <= 0:
            self.add(key, priority)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay
            pending = self._delayed_due.get(key)
            if pending is not None:
                due, priority = min(due, pending[0]), max(priority, pending[1])
                if (due, priority) == pending:
                    return
            self._delayed_due[key] = (due, priority)
            heapq.heappush(self._delayed, (due, next(self._seq), key, priority))
            self._cond.notify()

    def add_rate_limited(self, key: K, priority: int = NORMAL) -> float:
        delay = self.backoff.when(key)
        self.add_after(key, delay, priority)
        return delay

    def forget(self, key: K) -> None:
        self.backoff.forget(key)

    # -- consumers ---------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (marked processing until `done`); None on timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due()
                key = self._pop_ready()
                if key is not None:
                    self._processing.add(key)
                    del self._dirty[key]
                    return key
                if self._shutdown:
                    raise ShutDown()
                wait = None if deadline is None else deadline - self._clock()
                if self._delayed:
                    until_due = self._delayed[0][0] - self._clock()
                    wait = until_due if wait is None else min(wait, until_due)
                if wait is not None and wait <= 0:
                    if deadline is not None and self._clock() >= deadline:
                        return None
                    continue
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:  # added again while it was processed: run it once more
                self._push_ready(key, self._dirty[key])

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        """Keys waiting to be handed out."""
        with self._cond:
            return self._waiting()

    def pending(self) -> int:
        """Keys queued, processing or scheduled: zero means nothing is left to do."""
        with self._cond:
            return self._waiting() + len(self._processing) + len(self._delayed_due)

    # -- under the lock ----------------------------------------------------------------------
    def _waiting(self) -> int:
        return sum(1 for key in self._dirty if key not in self._processing)

    def _add(self, key: K, priority: int) -> None:
        current = self._dirty.get(key)
        if current is not None and current >= priority:
            return  # collapsed into the waiting add
        self._dirty[key] = priority
        if key not in self._processing:
            self._push_ready(key, priority)

    def _push_ready(self, key: K, priority: int) -> None:
        heapq.heappush(self._ready, (-priority, next(self._seq), key))
        self._cond.notify()

    def _pop_ready(self) -> K | None:
        while self._ready:
            negative, _, key = heapq.heappop(self._ready)
            if self._dirty.get(key) == -negative and key not in self._processing:
                return key
        return None

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key, priority = heapq.heappop(self._delayed)
            if self._delayed_due.get(key) == (due, priority):
                del self._delayed_due[key]
                self._add(key, priority)
