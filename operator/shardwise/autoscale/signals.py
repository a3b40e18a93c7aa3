"""Signals: each SLO and the queue as a ratio of observed to target, with the words for it.

A ratio above 1 means "more replicas needed" by that much, so every signal is compared on one
scale and the worst one drives the decision. The phrasing lives here too, so that reasons and
events name numbers the same way everywhere.
"""

from __future__ import annotations

import dataclasses

from shardwise.autoscale import observation as observation_mod
from shardwise.autoscale import policy as policy_mod

QUEUE = "queue"


@dataclasses.dataclass(frozen=True)
class Signal:
    """One measured quantity against its target."""

    key: str
    label: str
    observed: float
    target: float
    floor: float = 0.0  # the part of `observed` that does not depend on load

    def ratio_at(self, current: int, replicas: int) -> float:
        """The ratio this signal is projected to have at `replicas` (see replicas_for)."""
        return (self.floor + (self.observed - self.floor) * current / replicas) / self.target

    def replicas_for(self, current: int, utilisation: float) -> float:
        """Replicas at which this signal sits at `utilisation` of its target, if load spreads evenly.

        Only latency above the floor scales with load per replica: at n replicas it is
        floor + (observed - floor) x current / n. Infinite when even an idle replica exceeds it.
        """
        room = utilisation * self.target - self.floor
        if room <= 0:
            return float(current) if self.observed <= self.floor else float("inf")
        return current * max(self.observed - self.floor, 0.0) / room

    @property
    def ratio(self) -> float:
        return self.observed / self.target

    def compare(self, relation: str) -> str:
        """e.g. "TTFT p95 812 ms > SLO 500 ms"."""
        if self.key == QUEUE:
            return (f"queue {self.observed:.1f} waiting per ready replica {relation} "
                    f"limit {self.target:g}")
        return f"{self.label} {format_ms(self.observed)} {relation} SLO {format_ms(self.target)}"

    def share(self) -> str:
        """e.g. "TTFT p95 120 ms = 24% of SLO 500 ms"."""
        return (f"{self.label} {format_ms(self.observed)} = {self.ratio:.0%} of SLO "
                f"{format_ms(self.target)}")


def format_ms(ms: float) -> str:
    """Milliseconds the way people say them: "4.2 ms", "812 ms", "1.5 s"."""
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    return f"{ms / 1_000:.3g} s"


def latency_signals(slo: policy_mod.SloTargets, obs: observation_mod.Observation) -> list[Signal]:
    """One signal per SLO the user set and the window measured."""
    pairs = (
        ("ttft", "TTFT p95", obs.ttft_p95_ms, slo.ttft_p95_ms, None),
        ("itl", "ITL p95", obs.itl_p95_ms, slo.itl_p95_ms, obs.itl_floor_ms),
        ("e2e", "E2E p95", obs.e2e_p95_ms, slo.e2e_p95_ms, None),
    )
    return [Signal(key, label, observed, target, min(floor or 0.0, observed))
            for key, label, observed, target, floor in pairs
            if observed is not None and target is not None]


def queue_signal(policy: policy_mod.Policy, obs: observation_mod.Observation) -> Signal:
    """Requests waiting per ready replica against the policy's limit.

    Latency percentiles only count requests that finished, so under a sudden surge they lag the
    queue by a whole request lifetime; the queue shows the surge at once.
    """
    per_replica = obs.waiting / max(obs.replicas_ready, 1)
    return Signal(QUEUE, "queue", per_replica, policy.max_waiting_per_replica)
