"""Properties of decide() over arbitrary inputs: bounds always hold; the tolerance band never moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.autoscale import History, Observation, Policy, Record, decide
from shardwise.autoscale.policy import SloTargets, StepLimit

NOW = 100_000.0
latency = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
steps = st.one_of(st.integers(1, 10).map(StepLimit),
                  st.integers(1, 300).map(lambda p: StepLimit(float(p), percent=True)))


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    allow_zero = draw(st.booleans())
    minimum = draw(st.integers(0 if allow_zero else 1, 6))
    tolerance = draw(st.floats(0.01, 0.5))
    targets = draw(st.lists(st.floats(1.0, 10_000.0), min_size=3, max_size=3))
    chosen = draw(st.lists(st.booleans(), min_size=3, max_size=3).filter(any))
    slo = SloTargets(*(t if keep else None for t, keep in zip(targets, chosen)))
    return Policy(
        min_replicas=minimum,
        max_replicas=draw(st.integers(max(1, minimum), 24)),
        slo=slo,
        tolerance=tolerance,
        scale_up_stabilization_s=draw(st.sampled_from([0.0, 60.0, 300.0])),
        scale_down_stabilization_s=draw(st.sampled_from([0.0, 120.0, 300.0])),
        evaluation_period_s=draw(st.sampled_from([10.0, 30.0])),
        max_scale_up_step=draw(steps),
        max_scale_down_step=draw(steps),
        target_utilization=draw(st.floats(0.05, 1 - tolerance)),
        max_waiting_per_replica=draw(st.floats(0.5, 50.0)),
        allow_scale_to_zero=allow_zero,
    )


@st.composite
def histories(draw: st.DrawFn) -> History:
    records = draw(st.lists(st.builds(
        Record,
        at=st.floats(NOW - 1_000.0, NOW - 1.0),
        recommendation=st.integers(0, 40),
        desired_replicas=st.integers(0, 40),
        pressure=st.sampled_from([None, "ttft", "itl", "queue", "headroom"]),
        starting=st.booleans(),
        waiting=st.floats(0.0, 1_000.0),
    ), max_size=12))
    return History(tuple(sorted(records, key=lambda r: r.at)))


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    current = draw(st.integers(0, 30))
    ready = draw(st.integers(0, current))
    return Observation(
        current_replicas=current,
        replicas_ready=ready,
        replicas_starting=draw(st.integers(0, current - ready)),
        ttft_p95_ms=draw(latency),
        itl_p95_ms=draw(latency),
        e2e_p95_ms=draw(latency),
        waiting=draw(st.floats(0.0, 10_000.0)),
        running=draw(st.floats(0.0, 1_000.0)),
        kv_cache_usage=draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
        requests_per_second=draw(st.floats(0.0, 1_000.0)),
        capacity_replicas=draw(st.one_of(st.none(), st.integers(0, 30))),
    )


@settings(max_examples=75, deadline=None)
@given(policy=policies(), observation=observations(), history=histories())
def test_desired_stays_within_bounds_and_capacity(
    policy: Policy, observation: Observation, history: History
) -> None:
    decision = decide(policy, observation, history, NOW)
    capacity = observation.capacity_replicas
    assert 0 <= decision.desired_replicas <= policy.max_replicas
    if capacity is not None:
        assert decision.desired_replicas <= capacity
    if decision.capacity_limited:
        assert decision.desired_replicas == capacity
    if capacity is None or capacity >= policy.min_replicas:
        assert decision.desired_replicas >= policy.min_replicas
    assert decision.reason and "\n" not in decision.reason


@st.composite
def in_band(draw: st.DrawFn) -> tuple[Policy, Observation]:
    policy = draw(policies())
    current = draw(st.integers(max(1, policy.min_replicas), policy.max_replicas))
    ready = draw(st.integers(0, current))

    def within(target: float | None) -> float | None:
        if target is None:
            return None
        # Strictly inside, so that float rounding of observed/target cannot step over an edge.
        margin = policy.tolerance * draw(st.floats(0.0, 0.999))
        return target * (1 + draw(st.sampled_from([-1, 1])) * margin)

    observation = Observation(
        current_replicas=current,
        replicas_ready=ready,
        replicas_starting=draw(st.integers(0, current - ready)),
        ttft_p95_ms=within(policy.slo.ttft_p95_ms),
        itl_p95_ms=within(policy.slo.itl_p95_ms),
        e2e_p95_ms=within(policy.slo.e2e_p95_ms),
        waiting=max(ready, 1) * policy.max_waiting_per_replica * draw(st.floats(0.0, 1.0)),
        kv_cache_usage=draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
        requests_per_second=draw(st.floats(0.0, 1_000.0)),
        capacity_replicas=draw(st.one_of(st.none(), st.integers(current, 30))),
    )
    return policy, observation


@settings(max_examples=75, deadline=None)
@given(case=in_band(), history=histories())
def test_inside_the_tolerance_band_nothing_changes(
    case: tuple[Policy, Observation], history: History
) -> None:
    policy, observation = case
    decision = decide(policy, observation, history, NOW)
    assert decision.desired_replicas == observation.current_replicas, decision.reason
