"""Fitted constants of the performance model, from efficiency.yaml (written by calibrate_cli fit).

The performance model is physics (bytes, FLOPs, link transfers) times a handful of constants that
no datasheet gives: how much of the peak HBM bandwidth and tensor throughput an engine reaches per
GPU family, the fixed cost of an engine step and of a layer (kernel launches, scheduling), and the
extra fixed cost of a mixture-of-experts layer (router, top-k, grouped GEMM). These are fitted on
the measured results in measurements.yaml; the same file records the fit's in-sample error per
metric and GPU family. The expected error band `shardwise plan` states is the held-out one
(error_bands.yaml: leave-one-publisher-out cross-validation, written by calibrate_cli), not the fit's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources

import yaml


MIN_BAND_CASES = 5


@dataclass(frozen=True)
class FamilyEfficiency:
    """Share of the datasheet peak an engine reaches on one GPU family."""

    memory: float
    compute: float


@dataclass(frozen=True)
class ErrorBand:
    """Median and 90th percentile of |log2(predicted / measured)| (in the fit, or held out)."""

    median_log2: float
    p90_log2: float
    cases: int

    @property
    def typical_factor(self) -> float:
        return float(2**self.median_log2)

    @property
    def p90_factor(self) -> float:
        return float(2**self.p90_log2)


@dataclass(frozen=True)
class Efficiency:
    families: dict[str, FamilyEfficiency]
    step_overhead_s: float
    layer_overhead_s: float
    moe_layer_overhead_s: float
    overlap: float = 0.0  # share of min(compute, memory) a step adds to the larger one
    request_overhead_s: float = 0.0  # per request, before the first token: API server, tokenizer
    stream_overhead_s: float = 0.0  # added to TTFT per other stream being served (API server CPU)
    # Serial CPU time per request a burst's requests cost before the engine runs them (API server
    # and engine core intake: parse, template, tokenize, schedule); bounds a burst's request rate.
    intake_s: float = 0.0
    bands: dict[str, dict[str, ErrorBand]] = field(default_factory=dict)  # family -> metric -> band
    # Engine family (sglang, trtllm) -> its step time over vLLM's for the same model, GPU and
    # layout, fitted only where a source measured both (calibrate.paired_engines); vLLM and an
    # engine no source paired are 1.
    engines: dict[str, float] = field(default_factory=dict)
    # Columns per GPU an expert's GEMMs need to run at the dense rate (performance.py); 0: no
    # penalty for narrow expert slices.
    moe_width: float = 0.0

    def family(self, name: str) -> FamilyEfficiency:
        return self.families.get(name) or self.families["default"]

    def engine_factor(self, engine: str) -> float:
        return self.engines.get(engine, 1.0)

    def band_family(self, family: str) -> str:
        """The family whose bands describe `family`: its own when every metric it has rests on
        enough cases, else "all" (one or two cases say little about the next prediction)."""
        own = self.bands.get(family) or {}
        if own and all(b.cases >= MIN_BAND_CASES for b in own.values()):
            return family
        return "all"

    def band(self, family: str, metric: str) -> ErrorBand | None:
        return (self.bands.get(self.band_family(family)) or {}).get(metric)


def from_mapping(raw: dict[str, object]) -> Efficiency:
    families = {
        str(name): FamilyEfficiency(memory=float(v["memory"]), compute=float(v["compute"]))
        for name, v in (raw["families"] or {}).items()  # type: ignore[attr-defined]
    }
    bands = {
        str(family): {
            str(metric): ErrorBand(float(b["medianLog2"]), float(b["p90Log2"]), int(b["cases"]))
            for metric, b in metrics.items()
        }
        for family, metrics in (raw.get("errorBands") or {}).items()  # type: ignore[attr-defined]
    }
    return Efficiency(
        families=families,
        step_overhead_s=float(raw["stepOverheadMs"]) / 1e3,  # type: ignore[arg-type]
        layer_overhead_s=float(raw["layerOverheadUs"]) / 1e6,  # type: ignore[arg-type]
        moe_layer_overhead_s=float(raw["moeLayerOverheadUs"]) / 1e6,  # type: ignore[arg-type]
        overlap=float(raw.get("overlap", 0.0)),  # type: ignore[arg-type]
        request_overhead_s=float(raw.get("requestOverheadMs", 0.0)) / 1e3,  # type: ignore[arg-type]
        stream_overhead_s=float(raw.get("streamOverheadMs", 0.0)) / 1e3,  # type: ignore[arg-type]
        intake_s=float(raw.get("intakeMs", 0.0)) / 1e3,  # type: ignore[arg-type]
        bands=bands,
        moe_width=float(raw.get("moeFullRateWidth", 0.0)),  # type: ignore[arg-type]
        engines={str(k): float(v)
                 for k, v in (raw.get("engineFactors") or {}).items()},  # type: ignore[attr-defined]
    )


@dataclass(frozen=True)
class HeldOutBands:
    """Leave-one-publisher-out error bands (error_bands.yaml): engine -> GPU family -> metric."""

    bands: dict[str, dict[str, dict[str, ErrorBand]]]

    def _families(self, engine: str) -> dict[str, dict[str, ErrorBand]]:
        """An engine without held-out figures of its own gets every engine's."""
        return self.bands.get(engine) or self.bands.get("all") or {}

    def band_family(self, engine: str, family: str) -> str:
        """`family` when every metric it has rests on enough held-out figures, else "all"."""
        own = self._families(engine).get(family) or {}
        if own and all(b.cases >= MIN_BAND_CASES for b in own.values()):
            return family
        return "all"

    def band(self, engine: str, family: str, metric: str) -> ErrorBand | None:
        return (self._families(engine).get(self.band_family(engine, family)) or {}).get(metric)


def held_out_from_mapping(raw: dict[str, object]) -> HeldOutBands:
    return HeldOutBands({
        str(engine): {
            str(family): {
                str(metric): ErrorBand(float(b["medianLog2"]), float(b["p90Log2"]), int(b["cases"]))
                for metric, b in metrics.items()
            }
            for family, metrics in families.items()
        }
        for engine, families in (raw.get("bands") or {}).items()  # type: ignore[attr-defined]
    })


@functools.cache
def held_out() -> HeldOutBands:
    """The committed held-out bands, the ERROR BAND `shardwise plan` prints."""
    text = resources.files(__package__).joinpath("error_bands.yaml").read_text(encoding="utf-8")
    return held_out_from_mapping(yaml.safe_load(text))


@functools.cache
def fitted() -> Efficiency:
    text = resources.files(__package__).joinpath("efficiency.yaml").read_text(encoding="utf-8")
    return from_mapping(yaml.safe_load(text))
