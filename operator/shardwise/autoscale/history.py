"""Past recommendations, kept so that decisions can be stabilized over time windows.

Like the HorizontalPodAutoscaler's `behavior`, a scale-down goes only as low as the highest
recommendation of the scale-down window, and a scale-up only as high as the lowest of the
scale-up window. That needs memory, and memory must survive an operator restart (the design is
level-triggered), so History is immutable plain data with a list form the controller can store
on the resource's status and read back.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from shardwise.autoscale import learned as learned_mod


class Recordable(Protocol):
    """What History keeps of a decision (Decision satisfies it)."""

    @property
    def recommendation(self) -> int: ...

    @property
    def desired_replicas(self) -> int: ...

    @property
    def pressure(self) -> str | None: ...

    @property
    def history_window_s(self) -> float: ...

    @property
    def starting(self) -> bool: ...

    @property
    def waiting(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class Record:
    """One past evaluation: when, what the signals asked for, what was decided, and why.

    `starting`: replicas were starting or being added, so the next evaluation's metrics window
    does not yet show their effect in full. `waiting`: the queue then, to tell a draining queue
    from a growing one.
    """

    at: float
    recommendation: int
    desired_replicas: int
    pressure: str | None = None
    starting: bool = False
    waiting: float = 0.0


@dataclasses.dataclass(frozen=True)
class History:
    """Records in time order, oldest first, and what was learned about the deployment.

    `learned` (capacity samples, start time, forecast, idle time) is carried by each Decision and
    taken over by `record`: decide() computes it, History keeps it, nothing else changes it.
    """

    records: tuple[Record, ...] = ()
    learned: learned_mod.Learned = learned_mod.Learned()

    def record(self, decision: Recordable, now: float) -> History:
        """A new History with `decision` appended and records the next decisions cannot use dropped."""
        entry = Record(now, decision.recommendation, decision.desired_replicas, decision.pressure,
                       decision.starting, decision.waiting)
        oldest = now - decision.history_window_s
        learned = getattr(decision, "learned", None) or self.learned
        return History(tuple(r for r in self.records if r.at >= oldest) + (entry,), learned)

    def since(self, start: float, now: float) -> tuple[Record, ...]:
        """Records taken in [start, now]."""
        return tuple(r for r in self.records if start <= r.at <= now)

    def latest(self, now: float, max_gap_s: float) -> Record | None:
        """The last evaluation before `now`, if recent enough to compare with."""
        earlier = [r for r in self.records if r.at < now]
        if not earlier or now - earlier[-1].at > max_gap_s:
            return None
        return earlier[-1]

    def last_startup_s(self, now: float) -> float | None:
        """How long the most recent scale-up took to serve: its first `starting` evaluation to
        the first evaluation after that found nothing starting. None if none is on record."""
        ready_at: float | None = None
        for r in reversed([r for r in self.records if r.at <= now]):
            if not r.starting:
                ready_at = r.at
            elif ready_at is not None:
                began = r.at
                for earlier in reversed([e for e in self.records if e.at < began]):
                    if not earlier.starting:
                        break
                    began = earlier.at
                return ready_at - began
        return None

    def observed_since(self, start: float, now: float, max_gap_s: float) -> bool:
        """Whether evaluations ran from `start` (or before) to `now` with no gap over `max_gap_s`.

        False after an operator outage or with a lost history: the window was not watched, so
        nothing sustained can be claimed about it.
        """
        times = [r.at for r in self.records if r.at <= now]
        before = [i for i, at in enumerate(times) if at <= start]
        if not before:
            return False
        watched = times[before[-1]:] + [now]
        return all(later - earlier <= max_gap_s for earlier, later in zip(watched, watched[1:]))

    def consecutive(self, pressure: str, now: float, max_gap_s: float) -> int:
        """How many evaluations straight before `now` were under the same pressure."""
        count, later = 0, now
        for r in reversed(self.records):
            if r.at > now:
                continue
            if r.pressure != pressure or later - r.at > max_gap_s:
                break
            count, later = count + 1, r.at
        return count

