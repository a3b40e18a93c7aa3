"""The performance model held against published measurements (measurements.yaml).

Pure: turns each measured case into the planner's own inputs (the same memory model sizes the KV
cache, the same link model the same interconnect), predicts, and reports |log2(predicted/measured)|
per metric and GPU family, and whether same-source comparisons come out in the measured order.
It also holds the fit itself (coordinate descent over efficiency.yaml's constants, run by
calibrate_cli fit) and leave-one-source-out cross-validation: refit without one publisher's
measurements, predict them, and score the held-out errors per metric and engine family.
The fit, `make bench` (bench/bench_planner.py) and tests/unit/planner/test_calibration.py share it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from shardwise.planner import efficiency, engines, gpus, memory, models, performance

METRICS = ("ttftMs", "itlMs", "tokensPerSecond")
# Engine families: the part of a case's `engine` before the first "-" (vllm-0.11.0 -> vllm), except
# that NVIDIA NIM's LLM containers run TensorRT-LLM.
_ENGINE_FAMILIES = {"nim": "trtllm"}
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
            experts=int(raw.get("experts", 0)),
            experts_per_token=int(raw.get("expertsPerToken", 0)),
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
    dp: int = 1,
) -> float:
    """Tokens of KV cache one replica holds after weights and overhead (the memory model's room;
    DP: every rank's room, each rank holding attention and shared weights whole)."""
    fit = memory.memory_per_gpu(
        arch,
        bytes_per_weight=bytes_per_weight,
        max_model_len=1,
        max_concurrency=1,
        gpu_memory_utilization=gpu_memory_utilization,
        gpu_memory_mib=gpu_memory_mib,
        tp=tp,
        pp=pp,
        dp=dp,
    )
    room = (fit.usable_gib - fit.fixed_gib) * memory.GIB * dp
    per_token = (
        arch.kv_elements_per_token() * kv_bytes_per_element
        * memory.stage_share(arch.layers, pp) / min(tp, arch.kv_heads)
    )
    return max(0.0, room / per_token)


def engine_family(engine: str) -> str:
    """vllm, sglang, trtllm (NIM included) or whatever an engine string starts with."""
    head = engine.split("-", 1)[0].lower()
    return _ENGINE_FAMILIES.get(head, head)


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
    engine: str = ""
    dp: int = 1  # DP engines (vLLM --data-parallel-size, SGLang/TensorRT-LLM attention DP)
    ep: bool = False  # experts sharded over the TP x DP ranks

    @property
    def engine_family(self) -> str:
        return engine_family(self.engine)

    @property
    def layout(self) -> tuple[int, int, int, bool]:
        return self.tp, self.pp, self.dp, self.ep


def case(raw: Mapping[str, Any], inline: Mapping[str, Any]) -> Case:
    arch = _arch(str(raw["model"]), inline)
    gpu = gpus.lookup_gpu(str(raw["gpu"]))
    tp, pp = int(raw["tp"]), int(raw["pp"])
    dp, ep = int(raw.get("dp", 1)), bool(raw.get("ep"))
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
        dp=dp,
    )
    max_seqs = int(raw.get("maxNumSeqs", 256))
    saturation = bool(raw.get("saturation"))
    rate = float(raw["requestRate"]) if raw.get("requestRate") is not None else None
    work = performance.Workload(
        arch=arch,
        bytes_per_weight=bpw,
        max_model_len=int(raw["prompt"]) + int(raw["output"]),
        max_concurrency=max_seqs,
        prompt_tokens=int(raw["prompt"]),
        output_tokens=int(raw["output"]),
        concurrency=max_seqs if saturation or rate is not None else int(raw["concurrency"]),
        request_rate=rate,
        kv_capacity_tokens=capacity,
        fp8_compute=weights == "fp8",
        batched_tokens=int(raw.get("batchedTokens", performance.default_batched_tokens(gpu.memory_mib))),
        kv_bytes_per_element=kv_bytes,
        burst=saturation,
        api_server=not raw.get("offline"),
    )
    load = (
        "saturation" if saturation
        else f"rate={rate:g}/s" if rate is not None
        else f"C={raw['concurrency']}"
    )
    shape = (f"DP{dp}x" if dp > 1 else "") + f"TP{tp}xPP{pp}" + (f"xEP{tp * dp}" if ep else "")
    label = (
        f"{arch.name} {weights} {gpu.product} {shape} "
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
        engine=str(raw.get("engine", "")),
        dp=dp,
        ep=ep,
    )


def cases(data: Mapping[str, Any] | None = None) -> list[Case]:
    data = data or dataset()
    inline = data.get("architectures") or {}
    return [case(raw, inline) for raw in data["cases"]]


def predicted(c: Case, eff: efficiency.Efficiency | None = None) -> dict[str, float]:
    eff = eff or efficiency.fitted()
    # The engine's own speed against vLLM's (efficiency.engine_factor): its steps take this much
    # of vLLM's time, fitted where a source measured one model on one GPU with both engines. The
    # planner applies the same function to a spec's engine.
    p = engines.apply(performance.predict(c.work, c.hw, c.tp, c.pp, eff, dp=c.dp, ep=c.ep),
                      c.engine_family, eff)
    return {"ttftMs": p.ttft_s * 1e3, "itlMs": p.itl_s * 1e3,
            "tokensPerSecond": p.tokens_per_s}


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
    if a.source != b.source or a.hw.family != b.hw.family or a.engine != b.engine:
        return None
    wa, wb = a.work, b.work
    same_work = (
        wa.arch == wb.arch
        and wa.bytes_per_weight == wb.bytes_per_weight
        and (wa.prompt_tokens, wa.output_tokens) == (wb.prompt_tokens, wb.output_tokens)
        and wa.kv_bytes_per_element == wb.kv_bytes_per_element
        # SGLang's DP attention divides the prefill budget over its ranks: part of the layout.
        and (wa.batched_tokens == wb.batched_tokens or a.dp != b.dp)
        and wa.request_rate == wb.request_rate
        and a.hw.memory_bandwidth_gbps == b.hw.memory_bandwidth_gbps
    )
    if not same_work:
        return None
    if a.layout == b.layout and wa.concurrency != wb.concurrency:
        return "load"
    if a.layout != b.layout and wa.concurrency == wb.concurrency:
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


@dataclass(frozen=True)
class Comparison:
    """A same-source comparison to reproduce: b's metric over a's, as measured."""

    source: str
    metric: str
    what: str
    a: Case
    b: Case
    measured_ratio: float


# Measured differences below this are noise, not an ordering to reproduce.
_TIE = 0.03


def comparisons(
    all_cases: Sequence[Case], data: Mapping[str, Any] | None = None
) -> list[Comparison]:
    """Every same-source pair that differs only in load or layout, plus the data set's ratio-only
    `orderings` (whose sources have no cases of their own)."""
    data = data or dataset()
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
                    out.append(Comparison(
                        a.source, metric, f"{kind}: {a.label} -> {b.label}", a, b, ratio))
    inline = data.get("architectures") or {}
    for raw in data.get("orderings") or []:
        base = {**raw["base"], "source": raw["source"], "measured": {}}
        a, b = case(base, inline), case({**base, **raw["other"]}, inline)
        # `stated: higher | lower`: the source states the order in words, with no figure; only the
        # sign of the ratio is used (Ordering.agrees), so 2 and 1/2 stand for it.
        ratio = (float(raw["measuredRatio"]) if "measuredRatio" in raw
                 else {"higher": 2.0, "lower": 0.5}[str(raw["stated"])])
        out.append(Comparison(
            str(raw["source"]), str(raw["metric"]), f"layout: {a.label} -> {b.label}", a, b, ratio,
        ))
    return out


def _orderings(
    pairs: Sequence[Comparison], figures: Callable[[Case], Mapping[str, float]]
) -> list[Ordering]:
    return [
        Ordering(p.source, p.metric, p.what, p.measured_ratio,
                 figures(p.b)[p.metric] / figures(p.a)[p.metric])
        for p in pairs
    ]


def orderings(
    all_cases: Sequence[Case],
    eff: efficiency.Efficiency | None = None,
    data: Mapping[str, Any] | None = None,
    pairs: Sequence[Comparison] | None = None,
) -> list[Ordering]:
    pairs = comparisons(all_cases, data) if pairs is None else pairs
    memo: dict[int, dict[str, float]] = {}

    def figures(c: Case) -> dict[str, float]:
        if id(c) not in memo:
            memo[id(c)] = predicted(c, eff)
        return memo[id(c)]

    return _orderings(pairs, figures)


# ---------------------------------------------------------------------------------------------
# The fit: coordinate descent in log space over efficiency.yaml's constants (calibrate_cli fit
# runs it on every case and writes the result; cross_validate() runs it without one publisher).

MIN_FAMILY_CASES = 5
FIT_BOUNDS = {
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
    "intake_s": (0.5e-3, 30e-3),
    # An engine's step time over vLLM's: published engine comparisons on one model and GPU differ
    # by 1.2-2x (GPUStack's DeepSeek-R1 on 8 x H200: SGLang 1.21x vLLM's tokens/s).
    "engine": (0.4, 2.5),
    "moe_width": (64.0, 16384.0),
}
_SCALAR_KEYS = ("step_overhead_s", "layer_overhead_s", "moe_layer_overhead_s", "overlap",
                "request_overhead_s", "stream_overhead_s", "intake_s", "moe_width")


def objective(
    eff: efficiency.Efficiency, all_cases: Sequence[Case], pairs: Sequence[Comparison]
) -> float:
    """Per metric, median plus half the mean of |log2(predicted / measured)|, plus one per
    comparison in the wrong order."""
    memo = {id(c): predicted(c, eff) for c in all_cases}

    def figures(c: Case) -> dict[str, float]:
        if id(c) not in memo:
            memo[id(c)] = predicted(c, eff)
        return memo[id(c)]

    total = 0.0
    for metric in METRICS:
        values = [
            abs(math.log2(memo[id(c)][metric] / c.measured[metric]))
            for c in all_cases if metric in c.measured
        ]
        if values:
            total += statistics.median(values) + 0.5 * statistics.fmean(values)
    wrong = sum(not o.agrees for o in _orderings(pairs, figures))
    return total + 1.0 * wrong


def _with(eff: efficiency.Efficiency, key: str, value: float) -> efficiency.Efficiency:
    if key.startswith("engine."):
        return dataclasses.replace(eff, engines={**eff.engines, key.split(".", 1)[1]: value})
    if key == "*.compute":
        families = {k: dataclasses.replace(v, compute=value) for k, v in eff.families.items()}
        return dataclasses.replace(eff, families=families)
    if "." in key:
        family, field = key.split(".")
        fam = dataclasses.replace(eff.families[family], **{field: value})
        return dataclasses.replace(eff, families={**eff.families, family: fam})
    return dataclasses.replace(eff, **{key: value})


def _get(eff: efficiency.Efficiency, key: str) -> float:
    if key.startswith("engine."):
        return eff.engine_factor(key.split(".", 1)[1])
    if key == "*.compute":
        return float(eff.families["default"].compute)
    if "." in key:
        family, field = key.split(".")
        return float(getattr(eff.families[family], field))
    return float(getattr(eff, key))


def _own_families(all_cases: Sequence[Case]) -> list[str]:
    """GPU families with enough cases to pin their own memory efficiency."""
    counts = {f: sum(c.family == f for c in all_cases) for f in {c.family for c in all_cases}}
    return sorted(f for f, n in counts.items() if n >= MIN_FAMILY_CASES)


def _workload_key(c: Case) -> tuple[Any, ...]:
    w = c.work
    return (c.source, w.arch.name, w.bytes_per_weight, c.hw.memory_bandwidth_gbps,
            w.prompt_tokens, w.output_tokens, w.concurrency, w.burst, w.request_rate)


def paired_engines(all_cases: Sequence[Case]) -> list[str]:
    """Engine families other than vLLM that some source measured on the same model, GPU and
    workload as vLLM: the only evidence of an engine's own speed that is not also the model's
    error on a workload vLLM was never measured on."""
    vllm = {_workload_key(c) for c in all_cases if c.engine_family == "vllm"}
    return sorted({c.engine_family for c in all_cases
                   if c.engine_family != "vllm" and _workload_key(c) in vllm})


def fit(
    eff: efficiency.Efficiency,
    all_cases: Sequence[Case],
    rounds: int = 6,
    pairs: Sequence[Comparison] | None = None,
    progress: Callable[[int, float], None] | None = None,
    only: Sequence[str] | None = None,
) -> efficiency.Efficiency:
    """Coordinate descent from `eff`: memory efficiency per family with its own entry, one compute
    efficiency for all (only Hopper cases are compute-bound enough to pin it; a per-family compute
    factor would absorb unrelated errors) and the overheads, each within FIT_BOUNDS."""
    pairs = comparisons(all_cases) if pairs is None else pairs
    keys = [f"{f}.memory" for f in _own_families(all_cases) if f in eff.families]
    keys += ["*.compute", *_SCALAR_KEYS]
    keys += [f"engine.{e}" for e in paired_engines(all_cases)]
    if only is not None:  # e.g. ("moe_width", "engine"): the rest stays as `eff` has it
        keys = [k for k in keys if k in only or k.split(".")[0] in only]
    best = objective(eff, all_cases, pairs)
    for round_ in range(rounds):
        step = 0.25 / (round_ + 1)
        for key in keys:
            low, high = FIT_BOUNDS["engine" if key.startswith("engine.") else key.split(".")[-1]]
            for factor in (math.exp(step), math.exp(-step), math.exp(2 * step), math.exp(-2 * step)):
                current = _get(eff, key)
                value = min(high, max(low, current * factor if current > 0 else 0.05))
                trial = _with(eff, key, value)
                score = objective(trial, all_cases, pairs)
                if score < best - 1e-6:
                    eff, best = trial, score
        if progress is not None:
            progress(round_ + 1, best)
    return eff


def refit(
    start: efficiency.Efficiency,
    all_cases: Sequence[Case],
    rounds: int = 6,
    pairs: Sequence[Comparison] | None = None,
    progress: Callable[[int, float], None] | None = None,
    only: Sequence[str] | None = None,
) -> efficiency.Efficiency:
    """The whole fitting procedure on `all_cases`, from `start`'s constants: families with at
    least MIN_FAMILY_CASES cases get their own memory efficiency (a family without an entry in
    `start` begins from its default), the rest and unknown GPUs the geometric mean of those fitted,
    not constants fitted to one or two measurements. Error bands are left as `start` has them."""
    own = set(_own_families(all_cases))
    families = {k: v for k, v in start.families.items() if k in own or k == "default"}
    for name in own - set(families):
        families[name] = start.family(name)
    paired = set(paired_engines(all_cases))
    engines = {k: v for k, v in start.engines.items() if k in paired}
    if only is not None and "memory" not in only:
        families = dict(start.families)  # memory efficiencies stay as committed
    eff = fit(dataclasses.replace(start, families=families, engines=engines), all_cases, rounds,
              pairs, progress, only)
    if only is not None and "memory" not in only:
        return eff
    fitted = [v for k, v in eff.families.items() if k != "default"] or [eff.families["default"]]
    default = efficiency.FamilyEfficiency(
        memory=statistics.geometric_mean(f.memory for f in fitted),
        compute=statistics.geometric_mean(f.compute for f in fitted))
    return dataclasses.replace(eff, families={**eff.families, "default": default})


# ---------------------------------------------------------------------------------------------
# Leave-one-source-out cross-validation.

def publisher(data: Mapping[str, Any], source: str) -> str:
    """The group a source is held out with: its `publisher` (pages of one lab, one harness, one
    machine room are not independent of each other), else the source itself."""
    return str((data["sources"].get(source) or {}).get("publisher") or source)


@dataclass(frozen=True)
class Fold:
    group: str  # the publisher held out
    sources: tuple[str, ...]
    eff: efficiency.Efficiency  # fitted without them
    errors: tuple[Error, ...]  # their cases under that fit
    orderings: tuple[Ordering, ...]  # their same-source comparisons under that fit


def release(c: Case) -> str:
    """The engine release a case ran on, as the source states it (vllm-0.11.0, sglang-0.5.3)."""
    return c.engine or c.source


def cross_validate(
    data: Mapping[str, Any] | None = None,
    start: efficiency.Efficiency | None = None,
    rounds: int = 6,
    by: str = "publisher",
) -> list[Fold]:
    """For each publisher with cases: refit (refit(), from `start`, default the committed
    constants) on every other publisher's cases and comparisons, then predict the held-out ones.

    The starting point is the committed fit, which saw the sources it was fitted on
    (efficiency.yaml); the descent moves away from it on the reduced set, but for those sources
    the start is not entirely blind. Sources added after that fit never informed it.

    `by="release"` holds out one engine release at a time instead (every case run on
    vllm-0.11.0, then on sglang-0.5.3, ...): whether the figures carry to an engine version the
    fit never saw. A comparison is held out with its cases (both run on one release)."""
    data = data or dataset()
    start = start or efficiency.fitted()
    every = cases(data)
    pairs = comparisons(every, data)
    if by == "release":
        keys = {id(c): release(c) for c in every}
        names = sorted(set(keys.values()))
        members = {name: (name,) for name in names}
    else:
        keys = {id(c): publisher(data, c.source) for c in every}
        members = {}
        for source in data["sources"]:
            members.setdefault(publisher(data, source), ())
            members[publisher(data, source)] += (source,)
    folds = []
    for group, sources in members.items():
        held = [c for c in every if keys[id(c)] == group]
        if not held:
            continue  # ratio-only sources: nothing to predict, their comparisons stay in training
        held_ids = {id(c) for c in held}
        train = [c for c in every if id(c) not in held_ids]
        # A ratio-only comparison's cases are its own (not in `every`): its source decides.
        held_pair = [p for p in pairs if id(p.a) in held_ids or id(p.b) in held_ids
                     or (by == "publisher" and p.source in sources)]
        dropped = {id(p) for p in held_pair}
        kept = [p for p in pairs if id(p) not in dropped]
        eff = refit(start, train, rounds, kept)
        folds.append(Fold(
            group, tuple(sources), eff, tuple(errors(held, eff)),
            tuple(orderings(held, eff, data, held_pair)),
        ))
    return folds


_WITHIN = (1.5, 2.0)


@dataclass(frozen=True)
class Score:
    """Errors of one group of figures: median factor max(p/m, m/p), share within 1.5x and 2x."""

    figures: int
    median_factor: float
    within_1_5: float
    within_2: float


def score(errs: Sequence[Error]) -> Score | None:
    if not errs:
        return None
    logs = [e.log2 for e in errs]
    return Score(
        figures=len(logs),
        median_factor=float(2 ** statistics.median(logs)),
        within_1_5=sum(v <= math.log2(_WITHIN[0]) + 1e-12 for v in logs) / len(logs),
        within_2=sum(v <= math.log2(_WITHIN[1]) + 1e-12 for v in logs) / len(logs),
    )


def scores(errs: Sequence[Error]) -> dict[tuple[str, str], Score]:
    """(engine family or "all", metric) -> Score, for every pair with figures."""
    out: dict[tuple[str, str], Score] = {}
    families = ["all", *sorted({e.case.engine_family for e in errs})]
    for family in families:
        for metric in METRICS:
            chosen = [e for e in errs if e.metric == metric
                      and (family == "all" or e.case.engine_family == family)]
            s = score(chosen)
            if s is not None:
                out[(family, metric)] = s
    return out


def held_out_errors(folds: Sequence[Fold]) -> list[Error]:
    return [e for f in folds for e in f.errors]


# ---------------------------------------------------------------------------------------------
# What the calibrate command writes (shardwise.planner.calibrate_cli): the fitted constants
# (efficiency.yaml) and the held-out error bands `shardwise plan` quotes (error_bands.yaml).

def band_mapping(errs: Sequence[Error]) -> dict[str, dict[str, dict[str, float]]]:
    """GPU family ("all" first) -> metric -> median and p90 of |log2(predicted / measured)|."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for family in ["all", *sorted({e.case.family for e in errs})]:
        chosen = [e for e in errs if family == "all" or e.case.family == family]
        metrics: dict[str, dict[str, float]] = {}
        for metric in METRICS:
            subset = [e for e in chosen if e.metric == metric]
            if subset:
                median, p90 = band(subset)
                metrics[metric] = {"medianLog2": round(median, 3), "p90Log2": round(p90, 3),
                                   "cases": len(subset)}
        if metrics:
            out[family] = metrics
    return out


def efficiency_mapping(eff: efficiency.Efficiency, all_cases: Sequence[Case]) -> dict[str, Any]:
    """efficiency.yaml's body: the constants and the in-sample error bands of the fit."""
    body: dict[str, Any] = {
        "families": {name: {"memory": round(f.memory, 3), "compute": round(f.compute, 3)}
                     for name, f in sorted(eff.families.items())},
        "stepOverheadMs": round(eff.step_overhead_s * 1e3, 3),
        "layerOverheadUs": round(eff.layer_overhead_s * 1e6, 2),
        "moeLayerOverheadUs": round(eff.moe_layer_overhead_s * 1e6, 2),
        "overlap": round(eff.overlap, 3),
        "requestOverheadMs": round(eff.request_overhead_s * 1e3, 2),
        "streamOverheadMs": round(eff.stream_overhead_s * 1e3, 3),
        "intakeMs": round(eff.intake_s * 1e3, 3),
        "moeFullRateWidth": round(eff.moe_width, 1),
        "engineFactors": {k: round(v, 3) for k, v in sorted(eff.engines.items())},
    }
    # The bands of the constants as written (rounded), which is what a plan will use.
    return {**body, "errorBands": band_mapping(errors(all_cases, efficiency.from_mapping(body)))}


def held_out_band_mapping(folds: Sequence[Fold]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """error_bands.yaml's `bands`: engine family ("all" first) -> GPU family -> metric -> band of
    the leave-one-publisher-out errors (each figure predicted by a fit that never saw its source)."""
    held = held_out_errors(folds)
    out = {"all": band_mapping(held)}
    for engine in sorted({e.case.engine_family for e in held}):
        out[engine] = band_mapping([e for e in held if e.case.engine_family == engine])
    return out
