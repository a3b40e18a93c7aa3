"""Learned corrections: how far this fleet's engines run from the calibrated model, per layout.

The performance model is fitted on published measurements; a given cluster (driver, engine
version, clocks, noisy neighbours) runs its own distance from that. The operator compares what it
observes on each deployment with the model's prediction for the same load and request shape, and
keeps one correction per (model, GPU product, TP x PP): observed / predicted for TTFT, ITL and
tokens/s. Later plans for that combination multiply their predictions by it.

Rules, all pure:
- a window counts only with enough finished requests (MIN_REQUESTS) and a prediction to hold it to;
- the factor is a running geometric mean over the last HISTORY windows, so one odd window moves it
  little and an old engine's figures fade out;
- every factor stays within [1/BOUND, BOUND]: a broken scrape or a model that does not fit the
  engine at all must not turn predictions into nonsense (the status shows the raw ratio anyway).
The table is plain JSON (`to_table` / `from_table`), kept by the operator in a ConfigMap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shardwise.planner import performance, plans

BOUND = 4.0
HISTORY = 10
MIN_REQUESTS = 10
METRICS = ("ttft", "itl", "tokens_per_second")
_JSON = {"ttft": "ttftFactor", "itl": "itlFactor", "tokens_per_second": "tokensPerSecondFactor"}


def key(model: str, product: str, tp: int, pp: int, layout: str | None = None) -> str:
    """One entry per (model, GPU product, layout); model ids compare case-insensitively. The
    layout is the plan's label when it has one (DP8xTP1xEP8 is not TP1xPP1); plain layouts keep
    the TP8xPP1 keys learned before EP and DP existed."""
    return f"{model.strip().lower()}|{product}|{layout or f'TP{tp}xPP{pp}'}"


def clamp(factor: float) -> float:
    if not math.isfinite(factor) or factor <= 0:
        return 1.0
    return min(BOUND, max(1.0 / BOUND, factor))


def ratios(predicted: Mapping[str, float | None], observed: Mapping[str, float | None]) -> dict[str, float]:
    """observed / predicted per metric where both are positive numbers."""
    out = {}
    for metric in METRICS:
        p, o = predicted.get(metric), observed.get(metric)
        if p is not None and o is not None and p > 0 and o > 0 and math.isfinite(p) and math.isfinite(o):
            out[metric] = o / p
    return out


def learn(previous: plans.Correction | None, sample: Mapping[str, float]) -> plans.Correction | None:
    """Fold one window's observed/predicted ratios into the running correction."""
    if not sample:
        return previous
    samples = previous.samples if previous else 0
    weight = 1.0 / min(samples + 1, HISTORY)
    factors = {}
    for metric in METRICS:
        old = getattr(previous, metric) if previous else 1.0
        if metric in sample:
            logged = (1 - weight) * math.log(old) + weight * math.log(clamp(sample[metric]))
            factors[metric] = clamp(math.exp(logged))
        else:
            factors[metric] = old
    return plans.Correction(
        ttft=factors["ttft"], itl=factors["itl"], tokens_per_second=factors["tokens_per_second"],
        samples=samples + 1,
    )


def apply(prediction: performance.Prediction, correction: plans.Correction) -> performance.Prediction:
    """The prediction as this fleet runs it. The floor stays physical: a correction may make a
    figure slower than the model, never faster than the hardware allows."""
    return performance.Prediction(
        itl_s=max(prediction.floor_s, prediction.itl_s * correction.itl),
        ttft_s=max(prediction.floor_s, prediction.ttft_s * correction.ttft),
        tokens_per_s=prediction.tokens_per_s * correction.tokens_per_second,
        floor_s=prediction.floor_s,
        running=prediction.running,
        saturated=prediction.saturated,
    )


def material_change(old: plans.Correction | None, new: plans.Correction, threshold: float = 0.02) -> bool:
    """Worth persisting: a new entry, or a factor that moved by more than `threshold`."""
    if old is None:
        return True
    return any(abs(math.log(getattr(new, m) / getattr(old, m))) > threshold for m in METRICS)


def to_table(corrections: Mapping[str, plans.Correction]) -> dict[str, dict[str, Any]]:
    return {k: corrections[k].to_dict() for k in sorted(corrections)}


def from_table(table: Any) -> dict[str, plans.Correction]:
    """Read a stored table, skipping entries that are not well formed (never raising)."""
    out: dict[str, plans.Correction] = {}
    if not isinstance(table, Mapping):
        return out
    for name, entry in table.items():
        if not isinstance(entry, Mapping):
            continue
        try:
            values = {m: clamp(float(entry[_JSON[m]])) for m in METRICS}
            samples = int(entry.get("samples", 1))
        except (KeyError, TypeError, ValueError):
            continue
        out[str(name)] = plans.Correction(
            ttft=values["ttft"], itl=values["itl"], tokens_per_second=values["tokens_per_second"],
            samples=max(1, samples),
        )
    return out
