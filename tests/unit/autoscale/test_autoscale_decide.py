"""decide(): one table row per behaviour the issue names, plus the wording of events."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise.autoscale import Decision, Direction, History, Observation, Policy, Record, decide
from shardwise.autoscale import forecast
from shardwise.autoscale.learned import Learned, Sample
from shardwise.autoscale.policy import SloTargets, StepLimit

NOW = 10_000.0
# The SLO held at 4 and 8 req/s per replica and broke at 10.
LEARNED_BINS = Learned().with_sample(Sample(4.0, True)).with_sample(Sample(8.0, True)).with_sample(
    Sample(10.0, False)).bins
POLICY = Policy(min_replicas=1, max_replicas=8, slo=SloTargets(ttft_p95_ms=500.0, itl_p95_ms=50.0))


def policy(**changes: object) -> Policy:
    return dataclasses.replace(POLICY, **changes)


def obs(current: int = 2, **fields: object) -> Observation:
    """A serving deployment with traffic; every replica ready unless said otherwise."""
    values: dict[str, object] = {"replicas_ready": current, "requests_per_second": 10.0,
                                 "running": 4.0}
    values.update(fields)
    return Observation(current_replicas=current, **values)  # type: ignore[arg-type]


def forecasting(history: History, level: float, deviation: float, trend: float = 0.0) -> History:
    """`history` with the learned demand bins and a forecast made one period ago."""
    return dataclasses.replace(history, learned=Learned(bins=LEARNED_BINS, forecast=forecast.Forecast(
        level=level, trend=trend, deviation=deviation, at=NOW - 30.0)))


def watched(recommendation: int, seconds: float = 600.0, **fields: object) -> History:
    """Evaluations every 30 s up to just before NOW, all recommending `recommendation`."""
    times = [NOW - seconds + 30.0 * i for i in range(int(seconds // 30))]
    return History(tuple(Record(at, recommendation, recommendation, **fields)  # type: ignore[arg-type]
                         for at in times))


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    observation: Observation
    desired: int
    reason: str
    history: History = History()
    policy: Policy = POLICY
    capacity_limited: bool = False


CASES = [
    Case("inside band holds", obs(2, ttft_p95_ms=540.0, itl_p95_ms=30.0), 2,
         "TTFT p95 540 ms within SLO 500 ms ±10%"),
    Case("surge scales by the worst ratio", obs(2, ttft_p95_ms=812.0, itl_p95_ms=30.0), 4,
         "TTFT p95 812 ms > SLO 500 ms for 1 period"),
    Case("worst of several SLOs drives", obs(2, ttft_p95_ms=600.0, itl_p95_ms=110.0), 5,
         "ITL p95 110 ms > SLO 50 ms"),
    Case("step cap", obs(2, ttft_p95_ms=5_000.0), 6, "step limit +4: wants 20"),
    Case("percentage step cap", obs(4, ttft_p95_ms=5_000.0), 6, "step limit +2: wants 40",
         policy=policy(max_scale_up_step=StepLimit(50.0, percent=True))),
    Case("starting replicas hold", obs(3, replicas_ready=2, replicas_starting=1,
                                       ttft_p95_ms=900.0), 3,
         "TTFT p95 900 ms > SLO 500 ms for 1 period but 1 replica still starting"),
    Case("one settling period after replicas became ready", obs(3, ttft_p95_ms=900.0), 3,
         "replicas just became ready",
         history=History((Record(NOW - 30, 3, 3, "ttft", starting=True),))),
    Case("capacity bound", obs(2, ttft_p95_ms=1_250.0, capacity_replicas=3), 3,
         "bounded by GPU capacity: wants 5, only 3 fit", capacity_limited=True),
    Case("capacity below current shrinks", obs(4, ttft_p95_ms=500.0, capacity_replicas=3), 3,
         "bounded by GPU capacity: wants 4, only 3 fit", capacity_limited=True),
    Case("capacity below minReplicas", obs(1, ttft_p95_ms=500.0, capacity_replicas=1), 1,
         "bounded by GPU capacity: wants 2, only 1 fit", policy=policy(min_replicas=2),
         capacity_limited=True),
    Case("scale-down waits for the window", obs(4, ttft_p95_ms=100.0, itl_p95_ms=10.0,
                                                kv_cache_usage=0.2), 4,
         "scale-down window 300 s keeps 4", history=watched(4)),
    Case("scale-down needs the window watched", obs(4, ttft_p95_ms=100.0, itl_p95_ms=10.0,
                                                    kv_cache_usage=0.2), 4,
         "scale-down waits for 300 s of uninterrupted evaluations"),
    Case("a gap in evaluations restarts the wait", obs(4, ttft_p95_ms=100.0, itl_p95_ms=10.0,
                                                       kv_cache_usage=0.2), 4,
         "scale-down waits", history=History((Record(NOW - 900, 1, 1),))),
    Case("projected-utilisation scale-down", obs(6, ttft_p95_ms=100.0, itl_p95_ms=15.0,
                                                 kv_cache_usage=0.25), 3,
         "headroom for 1 period (ITL p95 15 ms = 30% of SLO 50 ms, KV cache 25%): projected "
         "utilisation 60% at 3 replicas",
         history=watched(3), policy=policy(max_scale_down_step=StepLimit(4))),
    Case("scale-down steps one at a time", obs(6, ttft_p95_ms=100.0, itl_p95_ms=15.0,
                                               kv_cache_usage=0.25), 5,
         "step limit -1: wants 3", history=watched(3)),
    Case("KV cache keeps replicas a quiet latency would drop", obs(4, ttft_p95_ms=100.0,
                                                                   itl_p95_ms=10.0,
                                                                   kv_cache_usage=0.6), 4,
         "projected utilisation 80% at 3 replicas exceeds target 70%", history=watched(4)),
    Case("projection that would breach holds", obs(3, ttft_p95_ms=430.0, itl_p95_ms=35.0,
                                                   kv_cache_usage=0.55), 3,
         "below SLO (TTFT p95 430 ms = 86% of SLO 500 ms, KV cache 55%) but projected "
         "utilisation 129% at 2 replicas exceeds target 70%", history=watched(3)),
    Case("no scale-down under a rollout", obs(6, ttft_p95_ms=100.0, itl_p95_ms=15.0, kv_cache_usage=0.25,
                                             rollout_in_progress=True), 6,
         "a rollout is replacing replicas: scale-down to 5 waits until it finishes", history=watched(3)),
    Case("a rollout does not stop a scale-up", obs(2, ttft_p95_ms=812.0, itl_p95_ms=30.0,
                                                   rollout_in_progress=True), 4,
         "TTFT p95 812 ms > SLO 500 ms for 1 period"),
    Case("maxReplicas clamps", obs(7, ttft_p95_ms=1_000.0), 8, "maxReplicas 8: wants 11"),
    Case("minReplicas clamps", obs(1, ttft_p95_ms=500.0), 2, "minReplicas 2: wants 1",
         policy=policy(min_replicas=2)),
    Case("no traffic goes towards minReplicas", obs(3, requests_per_second=0.0, running=0.0), 2,
         "no traffic for 1 period: towards minReplicas 1", history=watched(1)),
    Case("no traffic waits for the window", obs(3, requests_per_second=0.0, running=0.0), 3,
         "scale-down window 300 s keeps 3", history=watched(3)),
    Case("no traffic at minReplicas holds", obs(1, requests_per_second=0.0, running=0.0), 1,
         "no traffic; at minReplicas 1"),
    Case("scale to zero with opt-in, after the idle time", obs(1, requests_per_second=0.0, running=0.0), 0,
         "no traffic for 300 s (scaleToZeroAfterSeconds 300): to zero",
         history=dataclasses.replace(watched(1), learned=Learned(idle_since=NOW - 300.0)),
         policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("idle but not for long enough stays", obs(1, requests_per_second=0.0, running=0.0), 1,
         "no traffic for 120 s; to zero after 300 s",
         history=dataclasses.replace(watched(0), learned=Learned(idle_since=NOW - 120.0)),
         policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("idle from many replicas goes to one first", obs(3, requests_per_second=0.0, running=0.0), 2,
         "towards 1, zero after 300 s idle", history=watched(1),
         policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("a burst the queue absorbs is not answered with replicas",
         obs(2, ttft_p95_ms=2_000.0, waiting=40.0, requests_per_second=16.0), 2,
         "in a burst: the queue of 40 clears in about 5 s, before a replica could start",
         history=dataclasses.replace(watched(2), learned=Learned(
             bins=LEARNED_BINS,
             forecast=forecast.start(8.0, NOW - 30.0)))),
    Case("a genuine step still scales at once", obs(2, ttft_p95_ms=2_000.0, waiting=1_000.0,
                                                   requests_per_second=16.0), 6,
         "queue 500.0 waiting per ready replica > limit 8 for 1 period",
         history=dataclasses.replace(watched(2), learned=Learned(
             bins=LEARNED_BINS,
             forecast=forecast.start(8.0, NOW - 30.0)))),
    Case("the forecast scales up one start time ahead",
         obs(2, ttft_p95_ms=300.0, itl_p95_ms=30.0, requests_per_second=15.0), 3,
         "Forecast", history=forecasting(watched(2), level=14.0, deviation=0.5, trend=0.02)),
    # A period's rate strays from the load by noise; whether the replicas carry the load is judged
    # on the forecast, less the forecast's own noise, so a noisy period is not read as demand.
    Case("a one-period breach on a noisy period the forecast says is carried is noise",
         obs(2, ttft_p95_ms=700.0, itl_p95_ms=30.0, requests_per_second=17.5), 2,
         "noise, not demand; a second period scales",
         history=forecasting(watched(2), level=16.0, deviation=1.0)),
    Case("a one-period breach when the forecast itself exceeds what the replicas carry scales",
         obs(2, ttft_p95_ms=700.0, itl_p95_ms=30.0, requests_per_second=17.5), 3,
         "TTFT p95 700 ms > SLO 500 ms for 1 period",
         history=forecasting(watched(2), level=19.0, deviation=1.0)),
    Case("a second period of breach scales even when the forecast says it is carried",
         obs(2, ttft_p95_ms=700.0, itl_p95_ms=30.0, requests_per_second=17.5), 3,
         "TTFT p95 700 ms > SLO 500 ms for 2 periods",
         history=forecasting(History(watched(2).records[:-1] + (Record(NOW - 30.0, 2, 2, "ttft"),)),
                             level=16.0, deviation=1.0)),
    Case("traffic at zero cold-starts", obs(0, requests_per_second=0.5), 1,
         "traffic while scaled to zero (0.5 req/s, 0 waiting): cold start",
         policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("a request held at the gateway wakes a deployment at zero", obs(0, requests_per_second=0.0, running=0.0,
                                                                         held_requests=1.0), 1,
         "1 request(s) held at the gateway while scaled to zero: cold start",
         policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("zero stays zero without traffic", obs(0, requests_per_second=0.0, running=0.0), 0,
         "scaled to zero, no traffic", policy=policy(min_replicas=0, allow_scale_to_zero=True)),
    Case("queue guard fires while latency lags", obs(2, ttft_p95_ms=450.0, waiting=40.0), 5,
         "queue 20.0 waiting per ready replica > limit 8"),
    Case("a draining queue is the tail of a past surge", obs(4, ttft_p95_ms=2_000.0,
                                                             waiting=100.0), 4,
         "the queue of 100 is draining and clears in about 10 s",
         history=History((Record(NOW - 30, 4, 4, "ttft", waiting=400.0),))),
    Case("a queue that just emptied holds", obs(4, ttft_p95_ms=2_000.0), 4,
         "the queue just emptied", history=History((Record(NOW - 30, 4, 4, "ttft", waiting=50.0),))),
    Case("a slowly draining queue still scales", obs(4, ttft_p95_ms=2_000.0, waiting=380.0), 8,
         "queue 95.0 waiting per ready replica > limit 8 for 1 period",
         history=History((Record(NOW - 30, 4, 4, "ttft", waiting=400.0),))),
    Case("a growing queue scales", obs(4, ttft_p95_ms=2_000.0, waiting=400.0), 8,
         "queue 100.0 waiting per ready replica > limit 8",
         history=History((Record(NOW - 30, 4, 4, waiting=100.0),))),
    Case("traffic without latency samples holds", obs(2, ttft_p95_ms=None), 2,
         "traffic but no latency samples yet"),
    Case("scale-up window takes the lowest recommendation", obs(2, ttft_p95_ms=1_000.0), 2,
         "scale-up window 60 s allows 2", history=watched(2, seconds=60.0),
         policy=policy(scale_up_stabilization_s=60.0)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(case.policy, case.observation, case.history, NOW)
    assert decision.desired_replicas == case.desired, decision.reason
    assert case.reason in decision.reason
    assert decision.capacity_limited is case.capacity_limited
    current = case.observation.current_replicas
    expected = (Direction.UP if case.desired > current
                else Direction.DOWN if case.desired < current else Direction.HOLD)
    assert decision.direction is expected


def test_event_message_for_a_change() -> None:
    history = History((Record(NOW - 30, 2, 2, "ttft"),))
    decision = decide(policy(max_scale_up_step=StepLimit(1)),
                      obs(2, ttft_p95_ms=812.0), history, NOW)
    assert decision.event_message() == (
        "TTFT p95 812 ms > SLO 500 ms for 2 periods: replicas 2 -> 3 (step limit +1: wants 4)")


def test_event_message_without_notes() -> None:
    decision = decide(POLICY, obs(2, ttft_p95_ms=700.0), History(), NOW)
    assert decision.event_message() == "TTFT p95 700 ms > SLO 500 ms for 1 period: replicas 2 -> 3"


def test_event_message_for_a_hold() -> None:
    decision = decide(POLICY, obs(2, ttft_p95_ms=490.0), History(), NOW)
    assert decision.event_message() == (
        "TTFT p95 490 ms within SLO 500 ms ±10%: replicas stay at 2")


def test_periods_stop_counting_at_a_gap() -> None:
    history = History((Record(NOW - 300, 2, 2, "ttft"), Record(NOW - 30, 2, 2, "ttft")))
    decision = decide(POLICY, obs(2, ttft_p95_ms=700.0), history, NOW)
    assert "for 2 periods" in decision.reason


def test_decision_is_recorded_for_the_windows_it_needs() -> None:
    decision = decide(POLICY, obs(2, ttft_p95_ms=700.0), History(), NOW)
    assert isinstance(decision, Decision)
    history = History((Record(NOW - 2_000, 9, 9),)).record(decision, NOW)
    assert history.records == (Record(NOW, 3, 3, "ttft", starting=True, waiting=0.0),)
    assert decision.history_window_s >= POLICY.scale_down_stabilization_s


def test_worked_example_of_the_docs() -> None:
    """The worked example in decision.py and docs/autoscaling.md, step by step."""
    history = History()

    def step(at: float, observation: Observation) -> Decision:
        nonlocal history
        decision = decide(POLICY, observation, history, at)
        history = history.record(decision, at)
        return decision

    first = step(0.0, obs(2, ttft_p95_ms=700.0, itl_p95_ms=40.0))
    assert first.event_message() == "TTFT p95 700 ms > SLO 500 ms for 1 period: replicas 2 -> 3"
    starting = obs(3, replicas_ready=2, replicas_starting=1, ttft_p95_ms=650.0, itl_p95_ms=40.0)
    assert step(30.0, starting).desired_replicas == 3
    assert step(60.0, starting).desired_replicas == 3
    settling = step(90.0, obs(3, ttft_p95_ms=520.0, itl_p95_ms=38.0))
    assert (settling.desired_replicas, settling.cause) == (
        3, "replicas just became ready: one more period to measure them")
    busy = step(120.0, obs(3, ttft_p95_ms=430.0, itl_p95_ms=35.0, kv_cache_usage=0.55))
    assert busy.desired_replicas == 3 and "exceeds target 70%" in busy.reason
    # The load falls by half (from 10 to 5 req/s); 5 per replica broke the SLO at t=0, 5/2 did not.
    quiet = obs(3, ttft_p95_ms=150.0, itl_p95_ms=20.0, kv_cache_usage=0.25, requests_per_second=5.0)
    # The forecast follows the fall over about one start time, so the first periods still ask
    # for 3; then 2, and the count waits for the 300 s down window to hold only 2s.
    held = [step(150.0 + 30.0 * i, quiet) for i in range(10)]
    assert held[-1].recommendation == 2
    assert {d.desired_replicas for d in held} == {3}
    assert "scale-down window 300 s keeps 3" in held[-1].reason
    last_three = max(150.0 + 30.0 * i for i, d in enumerate(held) if d.recommendation == 3)
    at = 450.0
    while (down := step(at, quiet)).direction is not Direction.DOWN:
        at += 30.0
    assert at - last_three >= POLICY.scale_down_stabilization_s
    assert down.desired_replicas == 2


def test_latency_floors_let_a_quiet_deployment_scale_down() -> None:
    """ITL sits near the model's own per-token time even when idle: without the floor, 49% of the
    SLO reads as 49% utilisation and three replicas look needed; with it, one is enough."""
    from shardwise.autoscale import History, Observation, decide, policy_from_spec

    policy = policy_from_spec({"minReplicas": 1, "maxReplicas": 4, "slo": {"itlP95": "50ms"},
                               "scaleDownStabilizationSeconds": 0, "evaluationPeriodSeconds": 15})
    quiet = dict(current_replicas=3, replicas_ready=3, itl_p95_ms=24.5, running=2,
                 requests_per_second=3, kv_cache_usage=0.01)
    history = History()
    for t in (0.0, 15.0):
        history = history.record(decide(policy, Observation(**quiet), history, t), t)
    without = decide(policy, Observation(**quiet), history, 30.0)
    with_floor = decide(policy, Observation(**quiet, itl_floor_ms=20.0), history, 30.0)
    assert without.desired_replicas == 3 and "exceeds target" in without.reason
    assert with_floor.desired_replicas == 2  # one step down at a time (maxScaleDownStep 1)
    assert with_floor.recommendation == 1


def test_expected_startup_sets_the_drain_horizon_before_any_startup_was_measured() -> None:
    """A queue clearing in ~570 s: worth a scale-up when a warm-cache replica serves in 2 min,
    not when a new replica must first download its weights for 15 min."""
    history = History((Record(NOW - 30, 4, 4, "ttft", waiting=400.0),))
    warm = decide(POLICY, obs(4, ttft_p95_ms=2_000.0, waiting=380.0, expected_startup_s=120.0), history, NOW)
    cold = decide(POLICY, obs(4, ttft_p95_ms=2_000.0, waiting=380.0, expected_startup_s=900.0), history, NOW)
    assert warm.desired_replicas == 8
    assert cold.desired_replicas == 4 and "draining" in cold.reason
