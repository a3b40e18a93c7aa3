"""The performance model held against published measurements (measurements.yaml).

Pure: turns each measured case into the planner's own inputs (the same memory model sizes the KV
cache, the same link model the same interconnect), predicts, and reports |log2(predicted/measured)|
per metric and GPU family, and whether same-source comparisons come out in the measured order.
The fit (hack/fit-planner.py) and the unit test (tests/unit/planner/test_calibration.py) share it.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from shardwise.planner import efficiency, gpus, memory, models, performance

METRICS = ("ttftMs", "itlMs", "tokensPerSecond")
_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}


@functools.cache
def dataset() -> dict[str, Any]:
    text = (
        resources.files(__package__)
        .joinpath("measurements.yaml")
        .read_text(encoding="utf-8")
    )
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _arch(name: str, inline: Mapping[str, Any]) -> models.ModelArch:
    if name in inline:
        raw = inline[name]
        params = float(raw["parameters"])
        return models.ModelArch(
            name=name,
            layers=int(raw["layers"]),
            hidden_size=int(raw["hiddenSize"]),
            attention_heads=int(raw["attentionHeads"]),
            kv_heads=int(raw["kvHeads"]),
            head_dim=int(raw["headDim"]),
            parameters=params,
            active_parameters=float(raw.get("activeParameters", params)),
            source=str(raw["source"]),
        )
    arch = models.lookup_model(name)
    if arch is None:
        raise ValueError(f"calibration case names unknown model {name!r}")
    return arch


def hardware(gpu: gpus.GpuFacts, interconnect: str, pp: int) -> performance.Hardware:
    """The planner's hardware description of a single-node layout on `gpu`."""
    link = (
        performance.nvlink(gpu.nvlink_gbps)
        if interconnect in ("nvswitch", "nvlink") and gpu.nvlink_gbps > 0
        else performance.pcie(gpu.pcie_gbps)
    )
    return performance.Hardware(
        memory_bandwidth_gbps=gpu.memory_bandwidth_gbps,
        bf16_tflops=gpu.bf16_tflops,
        fp8_tflops=gpu.fp8_tflops,
        family=gpu.family,
        tp_link=link,
        stage_link=link,
        inter_node_hops=0,
    )


def kv_capacity_tokens(
    arch: models.ModelArch,
    *,
    bytes_per_weight: float,
    kv_bytes_per_element: float,
    gpu_memory_utilization: float,
    gpu_memory_mib: int,
    tp: int,
    pp: int,
) -> float:
    """Tokens of KV cache one replica holds after weights and overhead (the memory model's room)."""
    fit = memory.memory_per_gpu(
        arch,
        bytes_per_weight=bytes_per_weight,
        max_model_len=1,
        max_concurrency=1,
        gpu_memory_utilization=gpu_memory_utilization,
        gpu_memory_mib=gpu_memory_mib,
        tp=tp,
        pp=pp,
    )
    room = (fit.usable_gib - fit.fixed_gib) * memory.GIB
    per_token = (
        arch.kv_elements_per_token() * kv_bytes_per_element
        * memory.stage_share(arch.layers, pp) / min(tp, arch.kv_heads)
    )
    return max(0.0, room / per_token)


@dataclass(frozen=True)
class Case:
    source: str
    family: str
    label: str
    work: performance.Workload
    hw: performance.Hardware
    tp: int
    pp: int
    measured: Mapping[str, float]


def case(raw: Mapping[str, Any], inline: Mapping[str, Any]) -> Case:
    arch = _arch(str(raw["model"]), inline)
    gpu = gpus.lookup_gpu(str(raw["gpu"]))
    tp, pp = int(raw["tp"]), int(raw["pp"])
    weights = str(raw["weights"])
    bpw = _WEIGHT_BYTES[weights]
    kv_bytes = 1.0 if raw.get("kvCacheDtype") == "fp8" else 2.0
    capacity = kv_capacity_tokens(
        arch,
        bytes_per_weight=bpw,
        kv_bytes_per_element=kv_bytes,
        gpu_memory_utilization=float(raw.get("gpuMemoryUtilization", 0.9)),
        gpu_memory_mib=gpu.memory_mib,
        tp=tp,
        pp=pp,
    )
    max_seqs = int(raw.get("maxNumSeqs", 256))
    saturation = bool(raw.get("saturation"))
    work = performance.Workload(
        arch=arch,
        bytes_per_weight=bpw,
        max_model_len=int(raw["prompt"]) + int(raw["output"]),
        max_concurrency=max_seqs,
        prompt_tokens=int(raw["prompt"]),
        output_tokens=int(raw["output"]),
        concurrency=max_seqs if saturation else int(raw["concurrency"]),
        kv_capacity_tokens=capacity,
        fp8_compute=weights == "fp8",
        batched_tokens=int(raw.get("batchedTokens", performance.default_batched_tokens(gpu.memory_mib))),
        kv_bytes_per_element=kv_bytes,
    )
    load = "saturation" if saturation else f"C={raw['concurrency']}"
    label = (
        f"{arch.name} {weights} {gpu.product} TP{tp}xPP{pp} "
        f"{raw['prompt']}/{raw['output']} {load}"
    )
    return Case(
        source=str(raw["source"]),
        family=gpu.family,
        label=label,
        work=work,
        hw=hardware(gpu, str(raw.get("interconnect", "pcie")), pp),
        tp=tp,
        pp=pp,
        measured={k: float(v) for k, v in (raw.get("measured") or {}).items()},
    )


def cases(data: Mapping[str, Any] | None = None) -> list[Case]:
    data = data or dataset()
    inline = data.get("architectures") or {}
    return [case(raw, inline) for raw in data["cases"]]


def predicted(c: Case, eff: efficiency.Efficiency | None = None) -> dict[str, float]:
    p = performance.predict(c.work, c.hw, c.tp, c.pp, eff)
    return {"ttftMs": p.ttft_s * 1e3, "itlMs": p.itl_s * 1e3, "tokensPerSecond": p.tokens_per_s}


@dataclass(frozen=True)
class Error:
    case: Case
    metric: str
    predicted: float
    measured: float

    @property
    def log2(self) -> float:
        return abs(math.log2(self.predicted / self.measured))


def errors(all_cases: Sequence[Case], eff: efficiency.Efficiency | None = None) -> list[Error]:
    out = []
    for c in all_cases:
        figures = predicted(c, eff)
        for metric, value in c.measured.items():
            out.append(Error(c, metric, figures[metric], value))
    return out


def band(errs: Sequence[Error]) -> tuple[float, float]:
    """(median, 90th percentile) of |log2(predicted / measured)|."""
    values = sorted(e.log2 for e in errs)
    if not values:
        return 0.0, 0.0
    p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
    return statistics.median(values), p90


def _same_except(a: Case, b: Case) -> str | None:
    """'load' or 'layout' when two cases of one source differ only in that; else None."""
    if a.source != b.source or a.hw.family != b.hw.family:
        return None
    wa, wb = a.work, b.work
    same_work = (
        wa.arch == wb.arch
        and wa.bytes_per_weight == wb.bytes_per_weight
        and (wa.prompt_tokens, wa.output_tokens) == (wb.prompt_tokens, wb.output_tokens)
        and a.hw.memory_bandwidth_gbps == b.hw.memory_bandwidth_gbps
    )
    if not same_work:
        return None
    if (a.tp, a.pp) == (b.tp, b.pp) and wa.concurrency != wb.concurrency:
        return "load"
    if (a.tp, a.pp) != (b.tp, b.pp) and wa.concurrency == wb.concurrency:
        return "layout"
    return None


@dataclass(frozen=True)
class Ordering:
    source: str
    metric: str
    what: str
    measured_ratio: float  # b / a
    predicted_ratio: float

    @property
    def agrees(self) -> bool:
        return (self.measured_ratio > 1) == (self.predicted_ratio > 1)


# Measured differences below this are noise, not an ordering to reproduce.
_TIE = 0.03


def orderings(
    all_cases: Sequence[Case],
    eff: efficiency.Efficiency | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[Ordering]:
    data = data or dataset()
    figures = {id(c): predicted(c, eff) for c in all_cases}
    out = []
    for i, a in enumerate(all_cases):
        for b in all_cases[i + 1 :]:
            kind = _same_except(a, b)
            if kind is None:
                continue
            for metric in METRICS:
                if metric in a.measured and metric in b.measured:
                    ratio = b.measured[metric] / a.measured[metric]
                    if abs(math.log(ratio)) < _TIE:
                        continue
                    out.append(Ordering(
                        a.source, metric, f"{kind}: {a.label} -> {b.label}", ratio,
                        figures[id(b)][metric] / figures[id(a)][metric],
                    ))
    inline = data.get("architectures") or {}
    for raw in data.get("orderings") or []:
        base = {**raw["base"], "source": raw["source"], "measured": {}}
        a, b = case(base, inline), case({**base, **raw["other"]}, inline)
        metric = str(raw["metric"])
        out.append(Ordering(
            str(raw["source"]), metric, f"layout: {a.label} -> {b.label}",
            float(raw["measuredRatio"]), predicted(b, eff)[metric] / predicted(a, eff)[metric],
        ))
    return out
