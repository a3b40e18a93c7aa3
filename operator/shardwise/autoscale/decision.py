"""The scaling decision: from policy, observation and history to desired replicas and a reason.

Pure: no I/O, no Kubernetes, no clock (`now` is an argument), so every case is a table row.

Algorithm, one evaluation:
1. Hold while replicas are starting: their capacity is not in the observation yet, and acting on
   latency they are about to fix would overshoot. Hold one more period once they are ready: that
   period's metrics window still mixes time before and after.
2. Recommend. Each SLO gives a ratio observed/target; the queue gives waiting-per-ready-replica
   over its limit.
   - Pressure: the worst latency ratio is above 1 + tolerance, or the queue ratio above 1
     (latency percentiles lag a surge by a request lifetime; the queue does not). Recommend
     ceil(current x ratio) for the larger of the two - unless the queue is draining fast enough
     to empty before a replica added now could serve (the last startup time, from history): then
     the latency is the tail of a surge already absorbed, and the count holds.
   - Headroom: every latency ratio is below 1 - tolerance and the queue is within its limit.
     Recommend the fewest replicas at which every signal stays at targetUtilization of its
     target, so the smaller count does not breach at once. Only inter-token latency above its
     floor (the plan's idle-replica prediction) grows as load concentrates: at n replicas it is
     floor + (observed - floor) x current / n; TTFT (which holds queueing) and KV-cache usage
     scale as current / n. Without a floor this is ceil(current x max(ratio, KV) /
     targetUtilization). Never below one replica on this path.
   - No traffic: recommend minReplicas (zero only with allowScaleToZero).
   - Otherwise (inside the tolerance band, or no latency samples yet): recommend current.
3. Stabilize like the HPA's `behavior`: go up no further than the lowest recommendation of the
   scale-up window, down no further than the highest of the scale-down window. A scale-down also
   needs evaluations to have covered the whole down window (not so after a restart with lost
   history): sustained headroom must have been seen, not assumed.
4. Limit the step (maxScaleUpStep, maxScaleDownStep), clamp to [minReplicas, maxReplicas], then
   to the replicas the existing GPUs can hold. Clamps are facts, not choices: they ignore steps.
   While a rollout replaces replicas, no scale-down: the rollout depends on every old replica.

Worked example: minReplicas 1, maxReplicas 8, SLO TTFT p95 500 ms and ITL p95 50 ms, tolerance 0.1,
windows up 0 s / down 300 s, steps +4 / -1, targetUtilization 0.7, evaluation every 30 s.
- t=0: 2 ready, TTFT 700 ms (ratio 1.40), ITL 40 ms (0.80). 1.40 > 1.10: recommend ceil(2 x 1.40)
  = 3. Event: "TTFT p95 700 ms > SLO 500 ms for 1 period: replicas 2 -> 3".
- t=30, t=60: one replica starting: hold at 3. t=90: all ready; hold one settling period.
- t=120: TTFT 430 ms (0.86), ITL 35 ms (0.70), KV cache 0.55. All ratios < 0.90, but
  ceil(3 x 0.86 / 0.7) = 4 >= 3: removing a replica would breach, so hold.
- Load falls: TTFT 150 ms (0.30), ITL 20 ms (0.40), KV cache 0.25: recommend ceil(3 x 0.40 / 0.7)
  = 2. The 300 s down window still holds recommendations of 3, so the count stays at 3 until every
  recommendation of the last 300 s is 2 or less; then 3 -> 2 (one step of at most 1).
"""

from __future__ import annotations

import dataclasses
import enum
import math

from shardwise.autoscale import forecast as forecast_mod
from shardwise.autoscale import history as history_mod
from shardwise.autoscale import learned as learned_mod
from shardwise.autoscale import memory
from shardwise.autoscale import observation as observation_mod
from shardwise.autoscale import policy as policy_mod
from shardwise.autoscale import signals

HEADROOM = "headroom"
FORECAST = "forecast"
BURST = "burst"

# Evaluations run on a timer that drifts and may miss a beat; more than this between two of them
# means the autoscaler was not watching.
_MAX_GAP_PERIODS = 2.5
# A queue that empties before a replica added now could start serving is the tail of a surge
# already absorbed. Startup is measured from history; this is the floor when none is on record.
_DRAIN_PERIODS = 2.0
# More replicas than any cluster runs: a recommendation beyond it is reported as the bound + 1.
_ASTRONOMIC_REPLICAS = 1_000_000


class Direction(str, enum.Enum):
    UP = "up"
    DOWN = "down"
    HOLD = "hold"


@dataclasses.dataclass(frozen=True)
class Decision:
    """Desired replicas and why. `reason` is for status; `event_message()` for a Kubernetes Event.

    `recommendation` is what the signals alone asked for, before windows, steps and clamps;
    History keeps it for the stabilization windows of later decisions.
    """

    desired_replicas: int
    current_replicas: int
    recommendation: int
    cause: str
    notes: tuple[str, ...] = ()
    capacity_limited: bool = False
    pressure: str | None = None
    history_window_s: float = 0.0
    starting: bool = False
    waiting: float = 0.0
    learned: learned_mod.Learned | None = None
    # The expected time from a request at zero replicas to a ready one (minReplicas 0 only).
    wake_s: float | None = None

    @property
    def direction(self) -> Direction:
        if self.desired_replicas > self.current_replicas:
            return Direction.UP
        if self.desired_replicas < self.current_replicas:
            return Direction.DOWN
        return Direction.HOLD

    @property
    def reason(self) -> str:
        """One line: the cause, then whatever bounded the result."""
        return "; ".join((self.cause, *self.notes))

    def event_message(self) -> str:
        """e.g. "TTFT p95 812 ms > SLO 500 ms for 2 periods: replicas 2 -> 3"."""
        if self.direction is Direction.HOLD:
            change = f"replicas stay at {self.current_replicas}"
        else:
            change = f"replicas {self.current_replicas} -> {self.desired_replicas}"
        suffix = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.cause}: {change}{suffix}"


@dataclasses.dataclass(frozen=True)
class _Proposal:
    recommendation: int
    cause: str
    pressure: str | None = None
    # Past the idle time with no traffic at all: zero needs no window and no steps.
    final: bool = False


@dataclasses.dataclass(frozen=True)
class _Demand:
    """This evaluation's view of demand: the arrival rate, the forecast and the learned sizes."""

    rate: float  # requests/s arriving: served plus the queue's growth
    burst: bool  # the rate is beyond the outlier fence of the forecast made for it
    base: float  # the rate the forecast expected (what a burst falls back to)
    ahead: float  # the rate expected one start time and one period ahead
    peak: float  # the highest rate expected until a scale-down could be decided again
    noise: float  # how far one period's rate may stray above the forecast and not be a burst
    level_noise: float  # how far the forecast itself may stray from the load on noise alone
    horizon_s: float
    safe_rps: float | None  # per replica, where the SLO holds
    breaking_known: bool
    throughput_rps: float | None  # per replica, flat out (measured while a queue stood)


def decide(
    policy: policy_mod.Policy,
    observation: observation_mod.Observation,
    history: history_mod.History,
    now: float,
) -> Decision:
    """Desired replicas for this evaluation; see the module docstring for the algorithm."""
    observation = observation_mod.sanitized(observation)
    current = observation.current_replicas
    max_gap_s = _MAX_GAP_PERIODS * policy.evaluation_period_s
    learned, demand = _learn(policy, observation, history, now, max_gap_s)
    proposal = _propose(policy, observation, history, now, max_gap_s, demand, learned)
    notes: list[str] = []

    if proposal.final:
        desired = proposal.recommendation
    else:
        desired = _stabilize(policy, history, now, current, proposal.recommendation, max_gap_s, notes)
        desired = _limit_step(policy, current, desired, notes)
    desired = _clamp(policy, desired, notes)
    capacity = observation.capacity_replicas
    capacity_limited = capacity is not None and desired > capacity
    if capacity is not None and capacity_limited:
        notes.append(f"bounded by GPU capacity: wants {desired}, only {capacity} fit")
        desired = capacity
    if observation.rollout_in_progress and desired < current:
        notes.append(f"a rollout is replacing replicas: scale-down to {desired} waits until it finishes")
        desired = current

    return Decision(
        desired_replicas=desired,
        current_replicas=current,
        recommendation=proposal.recommendation,
        cause=proposal.cause,
        notes=tuple(notes),
        capacity_limited=capacity_limited,
        pressure=proposal.pressure,
        history_window_s=(max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
                          + max_gap_s),
        starting=observation.replicas_starting > 0 or desired > current,
        waiting=observation.waiting,
        learned=learned,
        wake_s=(_startup_s(policy, observation, history, learned, now)
                if policy.min_replicas == 0 else None),
    )


def _startup_s(policy: policy_mod.Policy, obs: observation_mod.Observation,
               history: history_mod.History, learned: learned_mod.Learned, now: float) -> float:
    """How long a replica added now takes to serve: measured here, else the model cache's figure,
    else two periods (the least a scale-up takes to show in the metrics)."""
    measured = learned.startup_s or history.last_startup_s(now)
    return measured or obs.expected_startup_s or _DRAIN_PERIODS * policy.evaluation_period_s


def _learn(
    policy: policy_mod.Policy,
    obs: observation_mod.Observation,
    history: history_mod.History,
    now: float,
    max_gap_s: float,
) -> tuple[learned_mod.Learned, _Demand]:
    """Fold this evaluation into what is learned: start time, forecast, a capacity sample, idle."""
    learned = history.learned
    previous = history.latest(now, max_gap_s)
    if previous is not None and previous.starting and obs.replicas_starting == 0 and obs.current_replicas:
        began = previous.at
        for r in reversed([r for r in history.records if r.at < previous.at]):
            if not r.starting:
                break
            began = r.at
        learned = learned.with_startup(now - began)
    startup_s = _startup_s(policy, obs, history, learned, now)
    dt = now - previous.at if previous is not None and now > previous.at else policy.evaluation_period_s
    growth = (obs.waiting - previous.waiting) / dt if previous is not None else 0.0
    served = obs.requests_per_second if obs.current_replicas else 0.0
    rate = max(0.0, served + growth)
    before = learned.forecast
    if before is not None and now - before.at > memory.HEARTBEAT_S + max_gap_s:
        before = None  # a forecast from before a long outage says nothing about now
    base = before.predict(before.at, dt) if before is not None else rate
    fc = forecast_mod.update(before, rate, now, startup_s=startup_s)
    burst = fc.in_burst
    learned = dataclasses.replace(learned, forecast=fc)
    if obs.waiting > 0 and previous is not None and previous.waiting > 0 and obs.replicas_ready:
        # A queue at both ends of the window: every ready replica served flat out.
        learned = learned.with_throughput(served / obs.replicas_ready)

    latency = signals.latency_signals(policy.slo, obs)
    settled = (obs.replicas_starting == 0 and (previous is None or not previous.starting)
               and obs.current_replicas > 0 and obs.replicas_ready == obs.current_replicas)
    quiet_queue = obs.waiting == 0 and (previous is None or previous.waiting == 0)
    if settled and quiet_queue and latency and served > 0 and not burst and not obs.rollout_in_progress:
        met = all(s.ratio <= 1 for s in latency)
        learned = learned.with_sample(learned_mod.Sample(served / obs.replicas_ready, met))
    if obs.has_traffic:
        learned = dataclasses.replace(learned, idle_since=None)
    elif learned.idle_since is None:
        learned = dataclasses.replace(learned, idle_since=now)

    horizon_s = startup_s + policy.evaluation_period_s
    # A replica removed now should not be wanted back before a scale-down could be decided again.
    down_horizon_s = horizon_s + policy.scale_down_stabilization_s
    demand = _Demand(rate=rate, burst=burst, base=base, ahead=fc.predict(now, horizon_s),
                     peak=fc.peak(now, down_horizon_s, policy.evaluation_period_s), horizon_s=horizon_s,
                     noise=fc.fence(policy.evaluation_period_s),
                     level_noise=fc.level_fence(policy.evaluation_period_s, startup_s),
                     safe_rps=learned.safe_rps, breaking_known=learned.breaking_known,
                     throughput_rps=learned.throughput_rps)
    return learned, demand


def _propose(
    policy: policy_mod.Policy,
    obs: observation_mod.Observation,
    history: history_mod.History,
    now: float,
    max_gap_s: float,
    demand: _Demand,
    learned: learned_mod.Learned,
) -> _Proposal:
    current = obs.current_replicas
    latency = signals.latency_signals(policy.slo, obs)
    queue = signals.queue_signal(policy, obs)
    worst = max(latency, key=lambda s: s.ratio, default=None)

    pressing = [s for s in latency if s.ratio > 1 + policy.tolerance]
    if queue.ratio > 1:
        pressing.append(queue)
    driver = max(pressing, key=lambda s: s.ratio, default=None)

    def periods(pressure: str) -> str:
        n = history.consecutive(pressure, now, max_gap_s) + 1
        return f"for {n} period{'s' if n != 1 else ''}"

    if obs.replicas_starting > 0:
        starting = (f"{obs.replicas_starting} replica{'s' if obs.replicas_starting != 1 else ''} "
                    f"still starting: holding at {current} until they serve")
        if driver is None:
            return _Proposal(current, starting)
        return _Proposal(current, f"{driver.compare('>')} {periods(driver.key)} but {starting}",
                         driver.key)
    previous = history.latest(now, max_gap_s)
    if previous is not None and previous.starting:
        return _Proposal(current, "replicas just became ready: one more period to measure them",
                         driver.key if driver is not None else None)
    if current == 0:
        if obs.has_traffic:
            wake = max(1, policy.min_replicas)
            if obs.held_requests > 0 and not obs.requests_per_second:
                return _Proposal(wake, f"{obs.held_requests:g} request(s) held at the gateway while scaled to "
                                       "zero: cold start")
            return _Proposal(wake, f"traffic while scaled to zero ({obs.requests_per_second:g} "
                                   f"req/s, {obs.waiting:g} waiting): cold start")
        return _Proposal(0, "scaled to zero, no traffic")
    draining = _drain_s(obs, previous, now)
    startup_s = demand.horizon_s - policy.evaluation_period_s
    horizon_s = max(startup_s, _DRAIN_PERIODS * policy.evaluation_period_s)
    if driver is not None and draining is not None and draining <= horizon_s:
        # The latency percentiles still hold requests that queued in the surge.
        queue = ("the queue just emptied" if obs.waiting == 0 else
                 f"the queue of {obs.waiting:.0f} is draining and clears in about {draining:.0f} s")
        return _Proposal(current, f"{driver.compare('>')} but {queue}", driver.key)
    ahead = _replicas_ahead(policy, current, demand)
    # A burst's latency says nothing about the load after it: it recommends what came before.
    before_burst = min(current, previous.recommendation) if previous is not None else current
    if driver is not None:
        absorbed = _absorbed_s(obs, demand, horizon_s)
        if absorbed is not None:
            return _Proposal(before_burst, f"{driver.compare('>')} in a burst: {absorbed}, before a "
                                           f"replica could start ({startup_s:.0f} s)", BURST)
        cause = f"{driver.compare('>')} {periods(driver.key)}"
        carried = _carried(policy, obs, demand, current)
        if (driver.key != signals.QUEUE and carried is not None
                and history.consecutive(driver.key, now, max_gap_s) == 0):
            return _Proposal(current, f"{driver.compare('>')} for 1 period at {carried}: noise, "
                                      "not demand; a second period scales", driver.key)
        wanted = _replicas_up_to(current * driver.ratio, policy.max_replicas)
        if demand.breaking_known and demand.safe_rps:
            # Latency grows faster than load near saturation, so its ratio overshoots: once the
            # load where the SLO holds is known, size for the demand and the queue (drained
            # within one start) instead, and never by less than one replica.
            needed = (max(demand.rate, demand.ahead) + obs.waiting / horizon_s) / demand.safe_rps
            wanted = min(wanted, max(current + 1, _replicas_up_to(needed, policy.max_replicas, 1e-9)))
        if ahead is not None and ahead > wanted:
            return _Proposal(ahead, f"{cause}; {_ahead_words(demand, ahead)}", driver.key)
        return _Proposal(wanted, cause, driver.key)
    if ahead is not None and ahead > current:
        return _Proposal(ahead, _ahead_words(demand, ahead).capitalize(), FORECAST)
    if demand.burst:
        return _Proposal(before_burst, f"a burst of {demand.rate:.3g} req/s against "
                                       f"{demand.base:.3g} expected, within the SLO", BURST)
    if not obs.has_traffic and worst is None:
        return _propose_idle(policy, current, learned, now, periods(HEADROOM))
    if worst is None:
        return _Proposal(current, "traffic but no latency samples yet")
    if worst.ratio < 1 - policy.tolerance:
        return _propose_down(policy, obs, latency, periods(HEADROOM), demand)
    return _Proposal(current, f"{worst.compare('within')} ±{policy.tolerance:.0%}")


def _replicas_ahead(policy: policy_mod.Policy, current: int, demand: _Demand) -> int | None:
    """Replicas the forecast rate needs at the learned safe load; None until the SLO has broken
    once (above the highest load served, capacity is not known) or when nothing is forecast."""
    if not demand.breaking_known or not demand.safe_rps or demand.ahead <= 0:
        return None
    return _replicas_up_to(demand.ahead / demand.safe_rps, policy.max_replicas, slack=1e-9)


def _carried(policy: policy_mod.Policy, obs: observation_mod.Observation, demand: _Demand,
             current: int) -> str | None:
    """In words, when the load fits the ready replicas at the load where the SLO held and nothing
    queues: a latency breach then is the engines' noise, not load.

    The load is what the forecast expected for this period and one start ahead, less how far the
    forecast strays on noise alone (its level fence), not this period's rate: a rate above the
    forecast but inside its burst fence is noise by the forecast's own measure, and one noisy
    period at a knife-edge load would otherwise buy a replica that the scale-down, which keeps a
    tolerance band, never gives back. Only one period is forgiven: a second scales."""
    if not demand.breaking_known or not demand.safe_rps or obs.waiting > 0 or demand.burst:
        return None
    load = max(demand.base, demand.ahead)
    if obs.replicas_ready < current or load - demand.level_noise > current * demand.safe_rps:
        return None
    return (f"{load:.3g} req/s expected, which {current} replicas carry at "
            f"{demand.safe_rps:.3g} req/s each")


def _ahead_words(demand: _Demand, replicas: int) -> str:
    assert demand.safe_rps is not None
    return (f"forecast {demand.ahead:.3g} req/s in {demand.horizon_s:.0f} s needs {replicas} replicas "
            f"at the {demand.safe_rps:.3g} req/s per replica where the SLO held")


def _absorbed_s(obs: observation_mod.Observation, demand: _Demand, horizon_s: float) -> str | None:
    """How a burst clears before a replica could start, in words; None when it would not.

    A burst is a rate beyond the forecast's outlier fence. If arrivals fall back to what the
    forecast expected, the queue drains at what the ready replicas serve flat out (measured while
    a queue stood; else the safe load, which is lower) minus that: done within the start time, a
    replica added now would arrive after the burst it was added for.
    """
    per_replica = demand.throughput_rps or (demand.safe_rps if demand.breaking_known else None)
    if not demand.burst or not per_replica:
        return None
    drain_rate = obs.replicas_ready * per_replica - demand.base
    if drain_rate <= 0:
        return None
    seconds = obs.waiting / drain_rate
    if seconds > horizon_s:
        return None
    if obs.waiting == 0:
        return "nothing is queued"
    return f"the queue of {obs.waiting:.0f} clears in about {seconds:.0f} s"


def _propose_idle(policy: policy_mod.Policy, current: int, learned: learned_mod.Learned, now: float,
                  periods: str) -> _Proposal:
    """No traffic: towards minReplicas; to zero (when allowed) only after the idle time."""
    idle_s = now - learned.idle_since if learned.idle_since is not None else 0.0
    if policy.min_replicas == 0:
        if idle_s >= policy.scale_to_zero_after_s:
            return _Proposal(0, f"no traffic for {idle_s:.0f} s (scaleToZeroAfterSeconds "
                                f"{policy.scale_to_zero_after_s:g}): to zero", HEADROOM, final=True)
        if current <= 1:
            return _Proposal(current, f"no traffic for {idle_s:.0f} s; to zero after "
                                      f"{policy.scale_to_zero_after_s:g} s")
        return _Proposal(1, f"no traffic {periods}: towards 1, zero after "
                            f"{policy.scale_to_zero_after_s:g} s idle", HEADROOM)
    if current <= policy.min_replicas:
        return _Proposal(current, f"no traffic; at minReplicas {policy.min_replicas}")
    return _Proposal(policy.min_replicas, f"no traffic {periods}: towards "
                                          f"minReplicas {policy.min_replicas}", HEADROOM)


def _drain_s(
    obs: observation_mod.Observation, previous: history_mod.Record | None, now: float
) -> float | None:
    """Seconds until the queue empties at its current drain rate; None unless it is draining."""
    if previous is None or not obs.waiting < previous.waiting or not now > previous.at:
        return None
    rate = (previous.waiting - obs.waiting) / (now - previous.at)
    if not rate > 0:  # a difference of denormals underflows to zero
        return None
    seconds = obs.waiting / rate
    return seconds if math.isfinite(seconds) else None


def _replicas_up_to(wanted: float, ceiling: int, slack: float = 0.0) -> int:
    """ceil(wanted - slack); `ceiling` + 1 for an infinite or astronomic wish (beyond any count a
    cluster runs), which the clamps that follow cut to the bound anyway, so nothing overflows."""
    if not wanted - slack <= max(ceiling, _ASTRONOMIC_REPLICAS):  # also +inf and NaN
        return ceiling + 1
    return max(0, math.ceil(wanted - slack))


def _propose_down(
    policy: policy_mod.Policy,
    obs: observation_mod.Observation,
    latency: list[signals.Signal],
    periods: str,
    demand: _Demand,
) -> _Proposal:
    """Fewest replicas at which every signal stays at the target utilisation and, once learned,
    the highest rate forecast until a replica could come back, plus the noise the forecast calls
    normal (its burst fence), fits at the load where the SLO held: noise at the new count must
    not scale straight back up, and what is beyond the fence is a burst the queue absorbs."""
    current = obs.current_replicas
    kv = obs.kv_cache_usage or 0.0
    target = policy.target_utilization
    needed = max([s.replicas_for(current, target) for s in latency] + [current * kv / target])
    # Infinite when an idle replica's latency already exceeds the target utilisation of its SLO:
    # no count is low enough, so the count holds.
    projected = min(current, max(1, _replicas_up_to(needed, current, slack=1e-9)))
    if demand.breaking_known and demand.safe_rps and projected < current:
        by_demand = _replicas_up_to(demand.peak / (demand.safe_rps * (1 - policy.tolerance)), current,
                                    slack=1e-9)
        if by_demand >= current:
            return _Proposal(current, f"below SLO ({worst_share(latency)}) but the forecast peak "
                                      f"{demand.peak:.3g} req/s needs {current} replicas at "
                                      f"{demand.safe_rps:.3g} req/s each")
        projected = max(projected, by_demand)
    worst = max(latency, key=lambda s: s.ratio)
    measured = worst.share() + (f", KV cache {kv:.0%}" if obs.kv_cache_usage is not None else "")

    def utilisation_at(n: int) -> float:
        return max([s.ratio_at(current, n) for s in latency] + [kv * current / n])

    if projected >= current:
        what = (f"{utilisation_at(current - 1):.0%} at {current - 1} replicas" if current > 1
                else "no fewer replicas on latency alone")
        return _Proposal(current, f"below SLO ({measured}) but projected utilisation {what} "
                                  f"exceeds target {target:.0%}")
    return _Proposal(projected, f"headroom {periods} ({measured}): projected utilisation "
                                f"{utilisation_at(projected):.0%} at {projected} replicas", HEADROOM)


def worst_share(latency: list[signals.Signal]) -> str:
    return max(latency, key=lambda s: s.ratio).share()


def _stabilize(
    policy: policy_mod.Policy,
    history: history_mod.History,
    now: float,
    current: int,
    recommendation: int,
    max_gap_s: float,
    notes: list[str],
) -> int:
    # The pressure of a moment is discounted by the window's other recommendations, as in the
    # HPA: up to the lowest of the up window, down to the highest of the down window.
    up_window = history.since(now - policy.scale_up_stabilization_s, now)
    down_window = history.since(now - policy.scale_down_stabilization_s, now)
    up_floor = min([recommendation, *(r.recommendation for r in up_window)])
    down_ceiling = max([recommendation, *(r.recommendation for r in down_window)])
    desired = current
    if desired < up_floor:
        desired = up_floor
    if desired > down_ceiling:
        desired = down_ceiling
    if recommendation > current and desired < recommendation:
        notes.append(f"scale-up window {policy.scale_up_stabilization_s:g} s allows {desired}")
    if recommendation < current and desired > recommendation:
        notes.append(f"scale-down window {policy.scale_down_stabilization_s:g} s keeps {desired}")
    window_start = now - policy.scale_down_stabilization_s
    if (desired < current and policy.scale_down_stabilization_s > 0
            and not history.observed_since(window_start, now, max_gap_s)):
        notes.append(f"scale-down waits for {policy.scale_down_stabilization_s:g} s of "
                     "uninterrupted evaluations")
        desired = current
    return desired


def _limit_step(policy: policy_mod.Policy, current: int, desired: int, notes: list[str]) -> int:
    if desired > current:
        allowed = policy.max_scale_up_step.allowed(current)
        if desired > current + allowed:
            notes.append(f"step limit +{allowed}: wants {desired}")
            return current + allowed
    if desired < current:
        allowed = policy.max_scale_down_step.allowed(current)
        if desired < current - allowed:
            notes.append(f"step limit -{allowed}: wants {desired}")
            return current - allowed
    return desired


def _clamp(policy: policy_mod.Policy, desired: int, notes: list[str]) -> int:
    if desired > policy.max_replicas:
        notes.append(f"maxReplicas {policy.max_replicas}: wants {desired}")
        return policy.max_replicas
    if desired < policy.min_replicas:
        notes.append(f"minReplicas {policy.min_replicas}: wants {desired}")
        return policy.min_replicas
    return desired
