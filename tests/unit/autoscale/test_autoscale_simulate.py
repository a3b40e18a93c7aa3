"""Whole load traces through decide() and the simulated plant: the figures the issue promises."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from shardwise.autoscale import Direction, policy_from_spec
from shardwise.autoscale import simulate as sim

POLICY = policy_from_spec({"minReplicas": 1, "maxReplicas": 12,
                           "slo": {"ttftP95": "500ms", "itlP95": "50ms"}})
PLANT = sim.Plant(latency_noise=0.05)
TRACES = {trace.name: trace for trace in sim.standard_traces()}


@functools.cache
def run(name: str) -> sim.Result:
    return sim.simulate(TRACES[name], POLICY, PLANT, seed=7)


def most_direction_changes_in(result: sim.Result, window_s: float) -> int:
    """Largest number of up/down reversals inside any window of `window_s`."""
    changes = result.changes
    reversals = [b.at for a, b in zip(changes, changes[1:]) if a.direction is not b.direction]
    return max((sum(1 for t in reversals if start <= t < start + window_s) for start in reversals),
               default=0)


def test_step_surge_reacts_within_two_periods_and_recovers() -> None:
    result = run("step surge")
    assert result.reaction_s is not None
    assert result.reaction_s <= 2 * POLICY.evaluation_period_s
    # Startup (90 s) plus draining what queued meanwhile; not a string of further scale-ups.
    assert result.recovery_s is not None and result.recovery_s <= 300
    assert result.direction_changes == 0
    assert 3 <= result.final_replicas <= 6, result.changes


def test_steady_noisy_load_does_not_oscillate() -> None:
    result = run("steady noisy")
    assert most_direction_changes_in(result, 600.0) <= 1, result.changes
    assert result.violation_minutes < 1.0


def test_short_spike_scales_up_once_and_back_after_the_down_window() -> None:
    result = run("short spike")
    trace = TRACES["short spike"]
    assert result.direction_changes <= 1, result.changes
    ups = [c.at for c in result.changes if c.direction is Direction.UP]
    downs = [c.at for c in result.changes if c.direction is Direction.DOWN]
    assert ups and all(up < min(downs) for up in ups)
    assert min(downs) - max(ups) >= POLICY.scale_down_stabilization_s
    assert result.final_replicas == trace.initial_replicas


def test_short_spike_within_the_up_window_changes_nothing() -> None:
    patient = dataclasses.replace(POLICY, scale_up_stabilization_s=120.0)
    result = sim.simulate(TRACES["short spike"], patient, PLANT, seed=7)
    assert result.changes == ()


def test_slow_ramp_only_scales_up() -> None:
    result = run("slow ramp")
    assert {c.direction for c in result.changes} == {Direction.UP}
    assert result.final_replicas >= 60 / PLANT.capacity_rps_per_replica
    # Regression guard: each added replica costs about startup time of violation.
    assert result.violation_minutes < 16


def test_diurnal_cycle_follows_load_without_flapping() -> None:
    result = run("diurnal")
    # The load never holds still, so the 10-minute rule for steady load does not apply; this is a
    # regression guard: fewer than one reversal an hour.
    assert result.direction_changes < 24, result.changes
    assert result.peak_replicas >= 50 / PLANT.capacity_rps_per_replica
    assert result.final_replicas <= 2
    # Far cheaper than holding the peak all day, while meeting the SLO >99% of the time.
    assert result.replica_minutes < 0.6 * result.peak_replicas * 24 * 60
    assert result.violation_minutes < 0.01 * 24 * 60


def test_capacity_bounds_the_surge() -> None:
    small = dataclasses.replace(PLANT, capacity_replicas=3)
    result = sim.simulate(TRACES["step surge"], POLICY, small, seed=7)
    assert result.peak_replicas == 3
    assert any("only 3 fit" in c.message for c in result.changes)


def test_runs_are_reproducible_and_seeded() -> None:
    trace = TRACES["steady noisy"]
    assert sim.simulate(trace, POLICY, PLANT, seed=7) == run("steady noisy")
    assert sim.simulate(trace, POLICY, PLANT, seed=8) != run("steady noisy")


BURST = [1] * 39 + [5] * 6 + [1] * 27  # 360 s in 5 s ticks: 5 replicas needed at t = 200..225 s
FAR = [1] * 39 + [5] * 6 + [1] * 75 + [5] * 6 + [1] * 18  # and again at t = 600..625 s
NEAR = [1] * 39 + [5] * 6 + [1] * 14 + [5] * 6 + [1] * 7  # and again at t = 300..325 s


@pytest.mark.parametrize(
    ("needs", "startup_s", "expected_s"),
    [
        pytest.param([], 90.0, 0.0, id="nothing needed"),
        pytest.param([1] * 12, 90.0, 60.0, id="the first replica is there from the start"),
        # Asked at 90 s (the last evaluation with it ready by 200 s), released at 240 s (the first
        # evaluation after the last tick that needs it): 150 s for each of 4 replicas.
        pytest.param(BURST, 90.0, 360.0 + 4 * 150.0, id="a burst costs its start ahead"),
        pytest.param(FAR, 90.0, 720.0 + 4 * (150.0 + 120.0), id="far bursts are two asks"),
        # The second burst's replicas must be asked for at 210 s, before the first's go at 240 s:
        # they stay, 90 s to 330 s.
        pytest.param(NEAR, 90.0, 360.0 + 4 * 240.0, id="near bursts share their replicas"),
        # Instant starts: no more than the instant bound, but asked at an evaluation before the
        # tick (at 180 s for 200 s), released at one after (240 s).
        pytest.param(BURST, 0.0, 360.0 + 4 * 60.0, id="instant starts still wait for evaluations"),
    ],
)
def test_startup_bound(needs: list[int], startup_s: float, expected_s: float) -> None:
    assert sim.startup_bound_s(needs, tick_s=5.0, period_s=30.0, startup_s=startup_s) == expected_s


def test_startup_bound_with_an_evaluation_every_tick_and_instant_starts_is_the_clairvoyant_one() -> None:
    needs = [1, 3, 2, 0, 1, 4, 4, 1]
    assert sim.startup_bound_s(needs, tick_s=5.0, period_s=5.0, startup_s=0.0) == 5.0 * sum(needs)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_startup_bound_is_never_below_the_clairvoyant_one(name: str) -> None:
    result = run(name)
    assert result.startup_bound_replica_minutes >= result.clairvoyant_replica_minutes - 1e-9


def test_the_bursty_hour_cannot_meet_its_slo_within_twice_the_clairvoyant_bound() -> None:
    # Every burst is shorter than a replica's start: serving each within the SLO means starting
    # its replicas ahead of it, which costs more than 2x the instant bound even with foresight.
    # The bursty target (2x, no more violation than the reactive policy's, which is what
    # the first, unforeseeable burst costs) is therefore out of reach of any policy on this plant.
    result = run("bursty")
    assert result.startup_bound_replica_minutes > 2 * result.clairvoyant_replica_minutes
