"""A trace simulator: `decide()` driving a toy serving plant through scripted load, in virtual time.

Unit tests pin single decisions; they cannot show reaction time, oscillation or cost over an hour
of traffic. This module runs the real decision function every evaluation period against a plant
whose latency climbs sharply near saturation and whose new replicas take a while to start, and
reports the figures the issue asks for. Pure: time is a loop counter and noise comes from a seeded
RNG, so a run is reproducible and takes milliseconds.

Plant, per tick of `tick_s`:
- capacity = ready replicas x `capacity_rps_per_replica`; utilisation u = arrivals / capacity;
- arrivals above capacity accumulate in a backlog, which drains when capacity returns;
- TTFT = base x (1 + u^3 / (1 - u)) (u capped at 0.98) plus the backlog's wait; ITL rises mildly
  with batch size; KV-cache usage follows u;
- a replica asked for becomes ready `startup_s` later (model load); removed ones vanish at once.
The autoscaler sees p95s over the last evaluation period, as the controller's metrics window does,
and, as vLLM's `request_success_total` does, the requests *served* per second (at saturation the
capacity, with the excess in the queue), not the arrivals.

Cost is reported against a clairvoyant lower bound: at every tick exactly the replicas the tick's
arrivals need to meet the SLO (the plant's noise-free latency at the SLO solved for utilisation),
ready at once, never fewer than minReplicas. No policy that waits for replicas to start can reach
it; on a bursty trace a policy that lets the queue absorb a burst may spend less than it, and
pays in violation minutes instead, which are reported beside it.

A second, tighter bound keeps the foresight but not the instant start: `startup_bound_s`, the
least a schedule that knows every tick's need in advance could spend when, like the policy, it may
change the count only at evaluations and a replica asked for serves `startup_s` later (billed from
the ask, as the simulated cluster bills it). On a trace whose bursts are shorter than a start, the
gap between the two bounds is the price of starting replicas ahead of bursts: for a policy that
meets the SLO throughout, what it costs above the second bound is its own doing, what lies between
the two is not (and a policy below the second bound is paying in violation minutes).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence

from shardwise.autoscale import decision as decision_mod
from shardwise.autoscale import history as history_mod
from shardwise.autoscale import observation as observation_mod
from shardwise.autoscale import policy as policy_mod

_MAX_UTILISATION = 0.98
_OUTPUT_TOKENS = 200


@dataclasses.dataclass(frozen=True)
class Plant:
    """The simulated deployment: per-replica throughput, base latency, startup delay, noise."""

    capacity_rps_per_replica: float = 10.0
    base_ttft_ms: float = 100.0
    base_itl_ms: float = 20.0
    startup_s: float = 90.0
    capacity_replicas: int | None = 16
    tick_s: float = 5.0
    latency_noise: float = 0.0


@dataclasses.dataclass(frozen=True)
class Trace:
    """A scripted load: requests/s as a function of time, and what to measure it by.

    `surge_at` is when the event whose reaction is measured begins; `initial_replicas` are ready
    at time zero; `load_noise` is the sigma of a lognormal factor on each tick's arrivals.
    """

    name: str
    duration_s: float
    load: Callable[[float], float]
    initial_replicas: int = 1
    surge_at: float | None = None
    load_noise: float = 0.0


@dataclasses.dataclass(frozen=True)
class Change:
    """One decision that changed the replica count."""

    at: float
    direction: decision_mod.Direction
    message: str


@dataclasses.dataclass(frozen=True)
class Result:
    """The figures of one run. Minutes and seconds are simulated time."""

    trace: str
    reaction_s: float | None
    recovery_s: float | None
    direction_changes: int
    violation_minutes: float
    replica_minutes: float
    clairvoyant_replica_minutes: float
    peak_replicas: int
    final_replicas: int
    changes: tuple[Change, ...]
    # The clairvoyant bound with replicas that take the plant's startup to serve (see the module
    # docstring); never below clairvoyant_replica_minutes.
    startup_bound_replica_minutes: float = 0.0


@dataclasses.dataclass
class _Replicas:
    # Mutable on purpose: local to one run, never escapes it.
    ready_at: list[float]

    def count(self) -> int:
        return len(self.ready_at)

    def ready(self, now: float) -> int:
        return sum(1 for at in self.ready_at if at <= now)

    def resize(self, desired: int, now: float, startup_s: float) -> None:
        if desired > self.count():
            self.ready_at.extend([now + startup_s] * (desired - self.count()))
        # Removing the newest first drops replicas still starting before serving ones.
        self.ready_at = sorted(self.ready_at)[:desired]


def simulate(
    trace: Trace,
    policy: policy_mod.Policy,
    plant: Plant = Plant(),
    *,
    seed: int = 0,
) -> Result:
    """Run `trace` through the plant with `decide()` every evaluation period."""
    rng = random.Random(seed)
    replicas = _Replicas([0.0] * trace.initial_replicas)
    history = history_mod.History()
    backlog = 0.0
    window: list[tuple[float, float | None, float | None, float, float]] = []
    changes: list[Change] = []
    needs: list[int] = []
    violation_s = replica_s = bound_s = 0.0
    slo_rps = plant.capacity_rps_per_replica * slo_utilisation(plant, policy.slo)
    peak = replicas.count()
    first_violation: float | None = None
    recovery_at: float | None = None
    next_decision = policy.evaluation_period_s
    ticks = int(round(trace.duration_s / plant.tick_s))

    for step in range(1, ticks + 1):
        now = step * plant.tick_s
        noise = rng.lognormvariate(0.0, trace.load_noise) if trace.load_noise else 1.0
        arrivals = max(0.0, trace.load(now)) * noise
        capacity = replicas.ready(now) * plant.capacity_rps_per_replica
        served = min(capacity, arrivals + backlog / plant.tick_s)
        backlog = max(0.0, backlog + (arrivals - capacity) * plant.tick_s)
        ttft, itl = _latency(plant, arrivals, capacity, backlog, rng)
        window.append((arrivals, ttft, itl, backlog, served))
        need = max(policy.min_replicas, math.ceil(arrivals / slo_rps - 1e-9))
        needs.append(need)
        bound_s += need * plant.tick_s

        violating = _violates(policy.slo, ttft, itl)
        replica_s += replicas.count() * plant.tick_s
        if violating:
            violation_s += plant.tick_s
        if trace.surge_at is not None and now >= trace.surge_at:
            if violating and first_violation is None:
                first_violation = now
            if not violating and first_violation is not None and recovery_at is None:
                recovery_at = now

        if now + 1e-9 >= next_decision:
            next_decision += policy.evaluation_period_s
            observation = _observe(plant, replicas, now, window)
            window = []
            decision = decision_mod.decide(policy, observation, history, now)
            history = history.record(decision, now)
            if decision.direction is not decision_mod.Direction.HOLD:
                changes.append(Change(now, decision.direction, decision.event_message()))
                replicas.resize(decision.desired_replicas, now, plant.startup_s)
                peak = max(peak, replicas.count())

    return Result(
        trace=trace.name,
        reaction_s=_reaction(trace, changes),
        recovery_s=_recovery(trace, first_violation, recovery_at),
        direction_changes=_direction_changes(changes),
        violation_minutes=violation_s / 60,
        replica_minutes=replica_s / 60,
        clairvoyant_replica_minutes=bound_s / 60,
        peak_replicas=peak,
        final_replicas=replicas.count(),
        changes=tuple(changes),
        startup_bound_replica_minutes=startup_bound_s(
            needs, tick_s=plant.tick_s, period_s=policy.evaluation_period_s,
            startup_s=plant.startup_s) / 60,
    )


def startup_bound_s(needs: Sequence[int], *, tick_s: float, period_s: float,
                    startup_s: float) -> float:
    """Replica-seconds of the cheapest schedule that has `needs[i]` replicas ready at tick i (at
    time (i + 1) x tick_s) when the count changes only at evaluations (every `period_s`) and a
    replica asked for is ready `startup_s` later; billed, as in `simulate`, from the ask to the
    evaluation that removes it.

    Replicas are interchangeable, so each level k of the need (the ticks needing at least k) is
    served by one replica per run of such ticks: asked for at the last evaluation that has it
    ready for the run's first tick, removed at the first evaluation at or after its last one (an
    evaluation acts after its tick is served). Removing is free and asking is what costs, so two
    runs share a replica only when the second must be asked for before the first releases it.
    A run too early for any evaluation to start it in time counts from time zero (the trace's
    initial replicas serve it, or nothing could): a bound, not a schedule, there.
    """
    end = len(needs) * tick_s
    total = 0.0
    for level in range(1, max(needs, default=0) + 1):
        held: tuple[float, float] | None = None  # (asked, released) of the replica on this level
        i = 0
        while i < len(needs):
            if needs[i] < level:
                i += 1
                continue
            first = i
            while i < len(needs) and needs[i] >= level:
                i += 1
            first_t, last_t = (first + 1) * tick_s, i * tick_s
            # Ready by the run's first tick, and asked before it: an evaluation acts after its
            # own tick has been served.
            latest = first_t - max(startup_s, tick_s)
            asked = max(0.0, math.floor(latest / period_s + 1e-9) * period_s)
            released = min(end, math.ceil(last_t / period_s - 1e-9) * period_s)
            if held is not None and asked <= held[1]:
                held = (held[0], released)
            else:
                if held is not None:
                    total += held[1] - held[0]
                held = (asked, released)
        if held is not None:
            total += held[1] - held[0]
    return total


def standard_traces() -> tuple[Trace, ...]:
    """The issue's five traces and a bursty hour, for an evaluation period of 30 s and a 300 s
    down window."""
    return (
        Trace("step surge", 2_400, lambda t: 6.0 if t < 610 else 30.0, surge_at=610),
        Trace("slow ramp", 4_200, lambda t: 5.0 + 55.0 * min(t, 3_600) / 3_600),
        Trace("short spike", 3_600, lambda t: 30.0 if 905 <= t < 965 else 10.0,
              initial_replicas=2, surge_at=905),
        Trace("steady noisy", 3_600, lambda t: 25.0, initial_replicas=4, load_noise=0.1),
        Trace("diurnal", 86_400,
              lambda t: 26.0 - 24.0 * math.cos(2 * math.pi * t / 86_400),
              initial_replicas=1, load_noise=0.1),
        bursty(),
    )


def bursty(base_rps: float = 4.0, burst_rps: float = 40.0, burst_s: float = 30.0,
           every_s: float = 240.0, duration_s: float = 3_600.0) -> Trace:
    """Sub-minute bursts every few minutes on a low base, as code completion sends: `burst_s` at
    `burst_rps` every `every_s` (with a seeded jitter of the spacing), `base_rps` otherwise."""
    jitter = random.Random(11)
    starts, t = [], every_s / 2
    while t < duration_s:
        starts.append(t)
        t += every_s * jitter.uniform(0.5, 1.5)

    def load(now: float) -> float:
        return burst_rps if any(s <= now < s + burst_s for s in starts) else base_rps

    return Trace("bursty", duration_s, load, initial_replicas=1)


def slo_utilisation(plant: Plant, slo: policy_mod.SloTargets) -> float:
    """The highest utilisation at which the plant's noise-free TTFT and ITL meet the SLO."""
    low, high = 0.0, _MAX_UTILISATION
    for _ in range(60):
        u = (low + high) / 2
        ttft = plant.base_ttft_ms * (1 + u**3 / (1 - u))
        itl = plant.base_itl_ms * (1 + 0.5 * u**2)
        ok = ((slo.ttft_p95_ms is None or ttft <= slo.ttft_p95_ms)
              and (slo.itl_p95_ms is None or itl <= slo.itl_p95_ms))
        low, high = (u, high) if ok else (low, u)
    return max(low, 1e-3)


def _latency(
    plant: Plant, arrivals: float, capacity: float, backlog: float, rng: random.Random
) -> tuple[float | None, float | None]:
    if arrivals <= 0 or capacity <= 0:
        return None, None
    u = min(arrivals / capacity, _MAX_UTILISATION)
    jitter = rng.lognormvariate(0.0, plant.latency_noise) if plant.latency_noise else 1.0
    queue_wait_ms = backlog / capacity * 1_000
    ttft = (plant.base_ttft_ms * (1 + u**3 / (1 - u)) + queue_wait_ms) * jitter
    itl = plant.base_itl_ms * (1 + 0.5 * u**2) * jitter
    return ttft, itl


def _observe(
    plant: Plant,
    replicas: _Replicas,
    now: float,
    window: list[tuple[float, float | None, float | None, float, float]],
) -> observation_mod.Observation:
    rps = sum(w[0] for w in window) / len(window)
    served = sum(w[4] for w in window) / len(window)
    ready = replicas.ready(now)
    capacity = ready * plant.capacity_rps_per_replica
    ttft = _p95([w[1] for w in window if w[1] is not None])
    itl = _p95([w[2] for w in window if w[2] is not None])
    return observation_mod.Observation(
        current_replicas=replicas.count(),
        replicas_ready=ready,
        replicas_starting=replicas.count() - ready,
        ttft_p95_ms=ttft,
        itl_p95_ms=itl,
        waiting=window[-1][3],
        running=served * ((ttft or 0) + _OUTPUT_TOKENS * (itl or 0)) / 1_000,
        kv_cache_usage=min(1.0, rps / capacity) if capacity > 0 else None,
        requests_per_second=served,
        capacity_replicas=plant.capacity_replicas,
        # The operator passes the plan's idle-replica ITL prediction; the plant's base ITL is that.
        itl_floor_ms=plant.base_itl_ms,
    )


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def _violates(slo: policy_mod.SloTargets, ttft: float | None, itl: float | None) -> bool:
    return ((slo.ttft_p95_ms is not None and ttft is not None and ttft > slo.ttft_p95_ms)
            or (slo.itl_p95_ms is not None and itl is not None and itl > slo.itl_p95_ms))


def _reaction(trace: Trace, changes: list[Change]) -> float | None:
    if trace.surge_at is None:
        return None
    ups = [c.at for c in changes
           if c.at >= trace.surge_at and c.direction is decision_mod.Direction.UP]
    return ups[0] - trace.surge_at if ups else None


def _recovery(trace: Trace, first_violation: float | None, recovery_at: float | None) -> float | None:
    if trace.surge_at is None:
        return None
    if first_violation is None:
        return 0.0
    return None if recovery_at is None else recovery_at - trace.surge_at


def _direction_changes(changes: list[Change]) -> int:
    directions = [c.direction for c in changes]
    return sum(1 for a, b in zip(directions, directions[1:]) if a is not b)
