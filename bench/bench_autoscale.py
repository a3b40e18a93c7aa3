"""Autoscaler figures over the standard load traces, to compare one version with the next.

Prints, per trace: reaction to the surge, time back under the SLO, up/down reversals, minutes in
violation of the SLO, replica-minutes used (the GPU bill) and the clairvoyant bound (exactly the
replicas each tick's arrivals need, ready at once) and the start bound (the same foresight, but
replicas asked for at evaluations and ready a startup later: what meeting the SLO at every tick
costs at the least when replicas take time to start), beside the figures of the reactive policy
this replaced; then how well three forecasts predict the rate one start time ahead, and the cost
of one decide() call.
Run: `.venv/bin/python bench/bench_autoscale.py` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from shardwise.autoscale import History, Observation, Policy, decide, policy_from_spec
from shardwise.autoscale import forecast as fc
from shardwise.autoscale import simulate as sim

SPEC = {"minReplicas": 1, "maxReplicas": 12, "slo": {"ttftP95": "500ms", "itlP95": "50ms"}}
POLICY = policy_from_spec(SPEC)
# Defaults first; then the one knob most worth comparing: a one-period scale-up window trades
# reaction time and violation minutes for fewer reversals under noise.
VARIANTS = {
    "defaults": POLICY,
    "scaleUpStabilizationSeconds: 30": policy_from_spec({**SPEC, "scaleUpStabilizationSeconds": 30}),
}
PLANT = sim.Plant(latency_noise=0.05)
# The reactive policy before the forecast (commit 8a09ec4), defaults, seed 7, same plant and
# traces: reaction, recovery, reversals, violation minutes, replica-minutes.
TODAY = {
    "step surge": ("20 s", "215 s", 0, 3.6, 158),
    "slow ramp": ("-", "-", 0, 14.6, 344),
    "short spike": ("25 s", "115 s", 1, 1.9, 151),
    "steady noisy": ("-", "-", 2, 0.2, 256),
    "diurnal": ("-", "-", 23, 2.8, 6566),
    "bursty": ("-", "-", 0, 1.7, 292),
}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def print_traces(policy: Policy, seed: int, *, today: bool) -> None:
    header = (f"{'trace':<14} {'reaction':>9} {'recovery':>9} {'reversals':>9} "
              f"{'violation min':>13} {'replica-min':>11} {'bound':>6} {'x bound':>7} "
              f"{'start bound':>11} {'x start':>7} {'peak':>4} {'final':>5}")
    if today:
        header += "   today: reaction recovery reversals viol-min rep-min"
    print(header)
    print("-" * len(header))
    for trace in sim.standard_traces():
        r = sim.simulate(trace, policy, PLANT, seed=seed)
        bound = r.clairvoyant_replica_minutes
        start = r.startup_bound_replica_minutes
        line = (f"{r.trace:<14} {_seconds(r.reaction_s):>9} {_seconds(r.recovery_s):>9} "
                f"{r.direction_changes:>9} {r.violation_minutes:>13.1f} {r.replica_minutes:>11.0f} "
                f"{bound:>6.0f} {r.replica_minutes / bound:>7.2f} {start:>11.0f} "
                f"{r.replica_minutes / start:>7.2f} {r.peak_replicas:>4} "
                f"{r.final_replicas:>5}")
        if today and trace.name in TODAY:
            reaction, recovery, reversals, violation, replica = TODAY[trace.name]
            line += (f"   {reaction:>15} {recovery:>8} {reversals:>9} {violation:>8.1f} "
                     f"{replica:>7}")
        print(line)


def _rates(trace: sim.Trace, period_s: float, seed: int) -> list[float]:
    """The trace's arrival rate per evaluation period, with the simulator's load noise."""
    rng = random.Random(seed)
    ticks = int(period_s // PLANT.tick_s)
    out = []
    for k in range(int(trace.duration_s // period_s)):
        values = []
        for i in range(ticks):
            t = k * period_s + (i + 1) * PLANT.tick_s
            noise = rng.lognormvariate(0.0, trace.load_noise) if trace.load_noise else 1.0
            values.append(max(0.0, trace.load(t)) * noise)
        out.append(sum(values) / len(values))
    return out


def _theil_sen(points: list[tuple[float, float]], at: float) -> float:
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(points) for b in points[i + 1:]]
    slope = statistics.median(slopes) if slopes else 0.0
    intercept = statistics.median(y - slope * x for x, y in points)
    return max(0.0, intercept + slope * at)


def print_forecasts(seed: int) -> None:
    """Mean absolute error of the rate predicted one start time and a period (120 s) ahead."""
    period = POLICY.evaluation_period_s
    horizon = PLANT.startup_s + period
    steps = int(horizon // period)
    print(f"forecast error, req/s, {horizon:.0f} s ahead (mean absolute; lower is better)")
    print(f"{'trace':<14} {'naive':>7} {'Theil-Sen':>9} {'Holt':>7}")
    for trace in sim.standard_traces():
        rates = _rates(trace, period, seed)
        errors: dict[str, list[float]] = {"naive": [], "theil": [], "holt": []}
        state = None
        for k, rate in enumerate(rates):
            now = (k + 1) * period
            state = fc.update(state, rate, now, startup_s=PLANT.startup_s)
            if k + steps >= len(rates) or k < steps:
                continue
            actual = rates[k + steps]
            window = [((j + 1) * period, rates[j]) for j in range(k - steps + 1, k + 1)]
            errors["naive"].append(abs(rate - actual))
            errors["theil"].append(abs(_theil_sen(window, now + horizon) - actual))
            errors["holt"].append(abs(state.predict(now, horizon) - actual))
        mean = {k: statistics.fmean(v) if v else math.nan for k, v in errors.items()}
        print(f"{trace.name:<14} {mean['naive']:>7.2f} {mean['theil']:>9.2f} {mean['holt']:>7.2f}")


def time_decide(calls: int) -> float:
    """Microseconds per decide() with a full scale-down window of history."""
    observation = Observation(current_replicas=6, replicas_ready=6, ttft_p95_ms=120.0,
                              itl_p95_ms=18.0, kv_cache_usage=0.3, requests_per_second=20.0)
    history = History()
    for i in range(20):
        history = history.record(decide(POLICY, observation, history, 30.0 * i), 30.0 * i)
    now = 30.0 * 20
    start = time.perf_counter()
    for _ in range(calls):
        decide(POLICY, observation, history, now)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    print(f"SLO TTFT p95 500 ms, ITL p95 50 ms; 1..12 replicas; plant "
          f"{PLANT.capacity_rps_per_replica:g} req/s per replica, {PLANT.startup_s:g} s startup; "
          f"seed {args.seed}")
    for name, policy in VARIANTS.items():
        print(f"\npolicy: {name}")
        print_traces(policy, args.seed, today=name == "defaults")
    print()
    print_forecasts(args.seed)
    print(f"\ndecide(): {time_decide(args.calls):.1f} µs per call")


if __name__ == "__main__":
    main()
