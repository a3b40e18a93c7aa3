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
import dataclasses
import math
import statistics
from importlib import resources

import yaml

from shardwise.planner import calibrate, efficiency

MIN_FAMILY_CASES = 5
BOUNDS = {
    "memory": (0.4, 0.95),
    "compute": (0.25, 0.95),
    "step_overhead_s": (0.1e-3, 5e-3),
    "layer_overhead_s": (1e-6, 60e-6),
    "moe_layer_overhead_s": (1e-6, 200e-6),
    "overlap": (0.0, 1.0),
    # vLLM answers an idle request's first token within 10-20 ms beyond the prefill itself (HTTP,
    # tokenizer, first scheduling); a larger fitted value would absorb one host's CPU limits.
    "request_overhead_s": (1e-3, 20e-3),
    "stream_overhead_s": (0.01e-3, 5e-3),
}


def _objective(eff: efficiency.Efficiency, cases: list[calibrate.Case]) -> float:
    errs = calibrate.errors(cases, eff)
    total = 0.0
    for metric in calibrate.METRICS:
        values = [e.log2 for e in errs if e.metric == metric]
        if values:
            total += statistics.median(values) + 0.5 * statistics.fmean(values)
    wrong = sum(not o.agrees for o in calibrate.orderings(cases, eff))
    return total + 1.0 * wrong


def _with(eff: efficiency.Efficiency, key: str, value: float) -> efficiency.Efficiency:
    if key == "*.compute":
        families = {k: dataclasses.replace(v, compute=value) for k, v in eff.families.items()}
        return dataclasses.replace(eff, families=families)
    if "." in key:
        family, field = key.split(".")
        fam = dataclasses.replace(eff.families[family], **{field: value})
        return dataclasses.replace(eff, families={**eff.families, family: fam})
    return dataclasses.replace(eff, **{key: value})


def _get(eff: efficiency.Efficiency, key: str) -> float:
    if key == "*.compute":
        return float(eff.families["default"].compute)
    if "." in key:
        family, field = key.split(".")
        return float(getattr(eff.families[family], field))
    return float(getattr(eff, key))


def fit(eff: efficiency.Efficiency, cases: list[calibrate.Case], rounds: int = 6) -> efficiency.Efficiency:
    # A family gets its own efficiencies only with enough cases to pin them; others use "default".
    counts = {f: sum(c.family == f for c in cases) for f in {c.family for c in cases}}
    families = sorted(f for f, n in counts.items() if n >= MIN_FAMILY_CASES)
    # Memory efficiency per family; one compute efficiency for all, because only Hopper cases are
    # compute-bound enough to pin it (a per-family compute factor would absorb unrelated errors).
    keys = [f"{f}.memory" for f in families] + ["*.compute"]
    keys += ["step_overhead_s", "layer_overhead_s", "moe_layer_overhead_s", "overlap",
             "request_overhead_s", "stream_overhead_s"]
    best = _objective(eff, cases)
    for round_ in range(rounds):
        step = 0.25 / (round_ + 1)
        for key in keys:
            low, high = BOUNDS[key.split(".")[-1]]
            for factor in (math.exp(step), math.exp(-step), math.exp(2 * step), math.exp(-2 * step)):
                current = _get(eff, key)
                value = min(high, max(low, current * factor if current > 0 else 0.05))
                trial = _with(eff, key, value)
                score = _objective(trial, cases)
                if score < best - 1e-6:
                    eff, best = trial, score
        print(f"round {round_ + 1}: objective {best:.4f}")
    return eff


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
        counts = {f: sum(c.family == f for c in cases) for f in {c.family for c in cases}}
        own = {f for f, n in counts.items() if n >= MIN_FAMILY_CASES} | {"default"}
        eff = dataclasses.replace(eff, families={k: v for k, v in eff.families.items() if k in own})
        eff = fit(eff, cases)
        # Families without enough cases (and unknown GPUs) get the geometric mean of those fitted,
        # not constants fitted to one or two measurements.
        fitted = [v for k, v in eff.families.items() if k != "default"]
        default = efficiency.FamilyEfficiency(
            memory=statistics.geometric_mean(f.memory for f in fitted),
            compute=statistics.geometric_mean(f.compute for f in fitted))
        eff = dataclasses.replace(eff, families={**eff.families, "default": default})
        _write(eff, cases)
    _report(eff, cases)


if __name__ == "__main__":
    main()
