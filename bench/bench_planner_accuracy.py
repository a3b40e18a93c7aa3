"""The planner's numbers against published measurements, out of sample first (issue 23).

Leave-one-publisher-out: for each publisher, the performance model's constants are refitted on
every other publisher's figures (calibrate.cross_validate) and the held-out figures predicted.
Prints, per engine family and metric, the median error factor max(p/m, m/p) and the share within
1.5x and 2x, held out beside in sample (the committed constants on every figure), then how many
same-source layout orderings the held-out fits get right, and whether error_bands.yaml (the held-out
bands `shardwise plan` prints as ERROR BAND) is this cross-validation's. Model figures: the same on
any machine.
Run: `.venv/bin/python bench/bench_planner_accuracy.py` (part of `make bench`).
"""

from __future__ import annotations

import time

import yaml

from shardwise.planner import calibrate, calibrate_cli

# Issue 23's targets on held-out vLLM figures: share within 2x.
TARGETS = {"itlMs": 0.85, "tokensPerSecond": 0.85, "ttftMs": 0.70}


def _cell(score: calibrate.Score | None) -> str:
    if score is None:
        return f"{'-':>22}"
    return f"{score.figures:>3}  x{score.median_factor:<5.2f} {score.within_1_5:>4.0%} {score.within_2:>4.0%}"


def main() -> int:
    started = time.perf_counter()
    data = calibrate.dataset()
    in_sample = calibrate.scores(calibrate.errors(calibrate.cases(data)))
    folds = calibrate.cross_validate(data)
    held = calibrate.scores(calibrate.held_out_errors(folds))
    took = time.perf_counter() - started
    sources = {s for f in folds for s in f.sources}
    print(f"{len(data['cases'])} cases from {len(data['sources'])} sources, {len(folds)} publishers held out "
          f"in turn ({len(sources)} sources with cases); {took:.1f} s")
    print(f"{'family':<8} {'metric':<16} {'held out: n  median <=1.5x <=2x':>36}   {'in sample':>22}")
    for family, metric in sorted(held, key=lambda k: (k[0] != "all", k)):
        print(f"{family:<8} {metric:<16} {_cell(held[(family, metric)]):>36}   "
              f"{_cell(in_sample.get((family, metric))):>22}")
    print("targets (issue 23), held-out vLLM figures within 2x:")
    for metric, floor in TARGETS.items():
        score = held.get(("vllm", metric))
        share = score.within_2 if score else 0.0
        print(f"  {metric}: {share:.0%} of {score.figures if score else 0} (target {floor:.0%}): "
              f"{'met' if share >= floor else 'NOT met'}")
    orderings = [o for f in folds for o in f.orderings]
    print(f"same-source layout orderings, held out: {sum(o.agrees for o in orderings)} of {len(orderings)} agree")
    # The ERROR BAND `shardwise plan` prints is these held-out errors (error_bands.yaml).
    with open(calibrate_cli._path("error_bands.yaml"), encoding="utf-8") as handle:
        current = calibrate_cli.same_bands(yaml.safe_load(handle), calibrate_cli.bands_body(folds))
    print("error_bands.yaml (the plan's ERROR BAND): "
          + ("matches this cross-validation" if current
             else "STALE: run `python -m shardwise.planner.calibrate_cli bands`"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
