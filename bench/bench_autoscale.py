"""Autoscaler figures over the standard load traces, to compare one version with the next.

Prints, per trace: reaction to the surge, time back under the SLO, up/down reversals, minutes in
violation of the SLO and replica-minutes used (the GPU bill); then the cost of one decide() call.
Run: `.venv/bin/python bench/bench_autoscale.py` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import time

from shardwise.autoscale import History, Observation, Policy, decide, policy_from_spec
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


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def print_traces(policy: Policy, seed: int) -> None:
    header = (f"{'trace':<14} {'reaction':>9} {'recovery':>9} {'reversals':>9} "
              f"{'violation min':>13} {'replica-min':>11} {'peak':>4} {'final':>5}")
    print(header)
    print("-" * len(header))
    for trace in sim.standard_traces():
        r = sim.simulate(trace, policy, PLANT, seed=seed)
        print(f"{r.trace:<14} {_seconds(r.reaction_s):>9} {_seconds(r.recovery_s):>9} "
              f"{r.direction_changes:>9} {r.violation_minutes:>13.1f} {r.replica_minutes:>11.0f} "
              f"{r.peak_replicas:>4} {r.final_replicas:>5}")


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
        print_traces(policy, args.seed)
    print(f"\ndecide(): {time_decide(args.calls):.1f} µs per call")


if __name__ == "__main__":
    main()
