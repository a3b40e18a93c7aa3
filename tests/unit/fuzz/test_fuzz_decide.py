"""Fuzz: decide() returns a count within [minReplicas, maxReplicas], or at the capacity bound,
for any policy the API accepts and any observation and history, however broken its numbers."""

from __future__ import annotations

from typing import Any

import fuzz_inputs
from hypothesis import assume, given
from hypothesis import strategies as st
from shardwise.autoscale import decision, history, observation, policy

_latency = st.one_of(st.none(), fuzz_inputs.numbers.filter(lambda v: not isinstance(v, int) or
                                                           abs(v) < 2**60).map(float))
_amount = fuzz_inputs.numbers.filter(lambda v: not isinstance(v, int) or abs(v) < 2**60).map(float)


@st.composite
def policies(draw: st.DrawFn) -> policy.Policy:
    low = draw(st.integers(0, 5))
    spec: dict[str, Any] = {
        "minReplicas": low,
        "maxReplicas": draw(st.integers(max(1, low), 40)),
        "allowScaleToZero": low == 0,
        "slo": {key: draw(st.sampled_from(["1ms", "50ms", "500ms", "20s", "0.001ms"]))
                for key in draw(st.lists(st.sampled_from(["ttftP95", "itlP95", "e2eP95"]),
                                         min_size=1, unique=True))},
        "tolerance": draw(st.sampled_from([0.0, 0.1, 0.5])),
        "targetUtilization": draw(st.sampled_from([0.05, 0.5, 0.7, 0.9])),
        "scaleDownStabilizationSeconds": draw(st.sampled_from([0, 60, 300])),
        "maxScaleUpStep": draw(st.sampled_from([1, 4, "100%", "1000%"])),
        "maxScaleDownStep": draw(st.sampled_from([1, 3, "50%"])),
        "maxWaitingPerReplica": draw(st.sampled_from([0.001, 8.0, 1e5])),
    }
    try:
        return policy.policy_from_spec(spec)
    except policy.PolicyError:
        assume(False)
        raise


@st.composite
def observations(draw: st.DrawFn) -> observation.Observation:
    current = draw(st.integers(-1, 50))
    return observation.Observation(
        current_replicas=current,
        replicas_ready=draw(st.integers(-1, 50)),
        replicas_starting=draw(st.sampled_from([0, 0, 0, 1, -1])),
        ttft_p95_ms=draw(_latency),
        itl_p95_ms=draw(_latency),
        e2e_p95_ms=draw(_latency),
        itl_floor_ms=draw(_latency),
        waiting=draw(_amount),
        running=draw(_amount),
        kv_cache_usage=draw(_latency),
        requests_per_second=draw(_amount),
        capacity_replicas=draw(st.one_of(st.none(), st.integers(-1, 60))),
    )


@st.composite
def histories(draw: st.DrawFn, now: float) -> history.History:
    records = []
    at = now - draw(st.sampled_from([400.0, 60.0, 30.0, 0.0]))
    for _ in range(draw(st.integers(0, 6))):
        records.append(history.Record(
            at=at, recommendation=draw(st.integers(0, 60)), desired_replicas=draw(st.integers(0, 60)),
            pressure=draw(st.sampled_from([None, "ttft", "itl", "queue", "headroom"])),
            starting=draw(st.booleans()), waiting=draw(_amount)))
        at += draw(st.sampled_from([30.0, 15.0, 5e-324, 0.0]))
    return history.History(tuple(r for r in records if r.at <= now))


@given(pol=policies(), obs=observations(), data=st.data())
def test_decide_stays_within_bounds(pol: policy.Policy, obs: observation.Observation,
                                   data: st.DataObject) -> None:
    fuzz_inputs.ran("decide")
    now = 10_000.0
    past = data.draw(histories(now))
    result = decision.decide(pol, obs, past, now)
    assert isinstance(result.desired_replicas, int) and isinstance(result.recommendation, int)
    if result.capacity_limited:
        assert result.desired_replicas == max(0, obs.capacity_replicas or 0)
    else:
        assert pol.min_replicas <= result.desired_replicas <= pol.max_replicas, result
    assert result.reason and result.event_message()
    past.record(result, now)  # what the controller does next must work too
