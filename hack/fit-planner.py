"""Fit the performance model's constants on the published measurements and write efficiency.yaml.

    .venv/bin/python hack/fit-planner.py            # fit, print the errors, write the file
    .venv/bin/python hack/fit-planner.py --check    # print the errors of the committed constants

Coordinate descent in log space over a handful of constants (memory and compute efficiency per GPU
family, step/layer/MoE-layer/request overheads, compute-memory overlap), minimising for each metric
the median plus half the mean of |log2(predicted / measured)|, with a large penalty for every
same-source comparison that comes out in the wrong order. Bounds keep every constant physical
(efficiencies at most 0.95 of the datasheet). docs/planner-calibration.md shows the result.
"""

from __future__ import annotations

import argparse
from importlib import resources

import yaml

from shardwise.planner import calibrate, efficiency

# The fitting procedure itself (bounds, objective, coordinate descent, the default family) lives in
# shardwise.planner.calibrate, where the leave-one-source-out cross-validation reruns it.


def _bands(eff: efficiency.Efficiency, cases: list[calibrate.Case]) -> dict[str, dict[str, dict[str, float]]]:
    errs = calibrate.errors(cases, eff)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for family in ["all", *sorted({c.family for c in cases})]:
        chosen = [e for e in errs if family == "all" or e.case.family == family]
        out[family] = {}
        for metric in calibrate.METRICS:
            subset = [e for e in chosen if e.metric == metric]
            if subset:
                median, p90 = calibrate.band(subset)
                out[family][metric] = {"medianLog2": round(median, 3), "p90Log2": round(p90, 3),
                                       "cases": len(subset)}
    return out


def _report(eff: efficiency.Efficiency, cases: list[calibrate.Case]) -> None:
    for family, metrics in _bands(eff, cases).items():
        for metric, band in metrics.items():
            print(f"{family:10} {metric:16} median {band['medianLog2']:.3f}  p90 {band['p90Log2']:.3f}"
                  f"  ({band['cases']} cases)")
    orderings = calibrate.orderings(cases, eff)
    print(f"orderings as measured: {sum(o.agrees for o in orderings)} of {len(orderings)}")


def _write(eff: efficiency.Efficiency, cases: list[calibrate.Case]) -> None:
    path = resources.files("shardwise.planner").joinpath("efficiency.yaml")
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                     if line.startswith("#"))
    body = {
        "families": {name: {"memory": round(f.memory, 3), "compute": round(f.compute, 3)}
                     for name, f in sorted(eff.families.items())},
        "stepOverheadMs": round(eff.step_overhead_s * 1e3, 3),
        "layerOverheadUs": round(eff.layer_overhead_s * 1e6, 2),
        "moeLayerOverheadUs": round(eff.moe_layer_overhead_s * 1e6, 2),
        "overlap": round(eff.overlap, 3),
        "requestOverheadMs": round(eff.request_overhead_s * 1e3, 2),
        "streamOverheadMs": round(eff.stream_overhead_s * 1e3, 3),
        "errorBands": _bands(eff, cases),
    }
    with open(str(path), "w", encoding="utf-8") as handle:
        handle.write(header)
        yaml.safe_dump(body, handle, sort_keys=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report only, do not fit or write")
    args = parser.parse_args()
    cases = calibrate.cases()
    eff = efficiency.fitted()
    if not args.check:
        eff = calibrate.refit(
            eff, cases, progress=lambda n, best: print(f"round {n}: objective {best:.4f}"))
        _write(eff, cases)
    _report(eff, cases)


if __name__ == "__main__":
    main()
