"""Parse one vLLM `/metrics` scrape into a compact `Sample` of the series shardwise needs.

SGLang's and TensorRT-LLM's scrapes are read too (spec.engine, issue 40): their series are renamed
to vLLM's on the way in (SGLANG_NAMES, TRTLLM_NAMES), so everything after this module reads one set
of names. The engine is told by its names (each has its own prefix), and each engine is held only to
the series it exposes (REQUIRED).

A vLLM 0.32 scrape is ~630 lines, of which ~110 matter here. The aggregation code only ever
sees `Sample`: plain numbers keyed by the names vLLM exposes, summed across `engine` labels
(data-parallel engines in one server are one pod to us).

Only the lines whose sample name we want are parsed: prometheus_client's parser over a whole
scrape costs ~12 ms of CPU, i.e. ~6 s per cycle at 500 pods (bench/bench_collector.py).
`# TYPE`/`# HELP` lines are dropped with the rest, which also sidesteps that parser's `_total`
munging of counters: samples keep their exposed names. Kept lines of vLLM's plain shape are
split by a strict regular expression; anything else goes through prometheus_client's parser.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping

from prometheus_client import parser

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
HISTOGRAMS = (TTFT, ITL, E2E, QUEUE)

# Counters keep their exposed `_total` name; REQUESTS is summed over `finished_reason`.
REQUESTS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
OUTPUT_TOKENS = "vllm:generation_tokens_total"
COUNTERS = (REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS)

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
GAUGES = (RUNNING, WAITING, KV_CACHE_USAGE)

# SGLang 0.5 (SERVING-SHAPES.md D: sgl-project/sglang@00ae9c1 python/sglang/srt/metrics/collector.py).
# Its KV gauge `sglang:token_usage` is the used fraction of the token pool, as vLLM's is of blocks;
# `sglang:num_requests_total` counts finished requests. It has no queue-time histogram of that name.
SGLANG_NAMES = {
    "sglang:time_to_first_token_seconds": TTFT,
    "sglang:inter_token_latency_seconds": ITL,
    "sglang:e2e_request_latency_seconds": E2E,
    "sglang:num_requests_total": REQUESTS,
    "sglang:prompt_tokens_total": PROMPT_TOKENS,
    "sglang:generation_tokens_total": OUTPUT_TOKENS,
    "sglang:num_running_reqs": RUNNING,
    "sglang:num_queue_reqs": WAITING,
    "sglang:token_usage": KV_CACHE_USAGE,
}
# TensorRT-LLM's /prometheus/metrics (SERVING-SHAPES.md E): the five of 1.1.0rc5 (request success,
# e2e, TTFT, time per output token, queue time), and what NVIDIA/TensorRT-LLM@050f80d
# tensorrt_llm/metrics/collector.py adds (running, waiting, KV utilisation, token counters).
TRTLLM_NAMES = {
    "trtllm_time_to_first_token_seconds": TTFT,
    "trtllm_time_per_output_token_seconds": ITL,
    "trtllm_e2e_request_latency_seconds": E2E,
    "trtllm_request_queue_time_seconds": QUEUE,
    "trtllm_request_success_total": REQUESTS,
    "trtllm_prompt_tokens_total": PROMPT_TOKENS,
    "trtllm_generation_tokens_total": OUTPUT_TOKENS,
    "trtllm_num_requests_running": RUNNING,
    "trtllm_num_requests_waiting": WAITING,
    "trtllm_kv_cache_utilization": KV_CACHE_USAGE,
}
ENGINE_NAMES = {"sglang": SGLANG_NAMES, "trtllm": TRTLLM_NAMES}
# The series a scrape must hold to be read as that engine's (in vLLM's names, after renaming).
REQUIRED = {
    "vllm": HISTOGRAMS + COUNTERS + GAUGES,
    "sglang": (TTFT, ITL, E2E) + COUNTERS + GAUGES,
    "trtllm": (TTFT, ITL, E2E, QUEUE, REQUESTS),
}
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


# Plausible values. A sample outside them (NaN, an infinity, a negative count, a bucket bound of
# 1e308 s) comes from a broken or relabelled exporter: it is treated as missing, and Sample.ignored
# says so, rather than turned into negative rates or infinite quantiles. vLLM's buckets stop at
# about two hours; a count of 1e15 is decades of a busy server.
MAX_BUCKET_BOUND_S = 1e6
MAX_COUNT = 1e15
_GAUGE_RANGES = {RUNNING: (0.0, 1e9), WAITING: (0.0, 1e9), KV_CACHE_USAGE: (0.0, 1.0)}
_CREATED_RANGE = (0.0, 1e12)  # a Unix timestamp, seconds


class MetricsError(ValueError):
    """A scrape that cannot be turned into a Sample."""


class NotPrometheusText(MetricsError):
    """The body is not in the Prometheus text exposition format."""


class NotVllmMetrics(MetricsError):
    """The body is Prometheus text, but lacks the vLLM series shardwise needs."""


@dataclasses.dataclass(frozen=True)
class Histogram:
    """A classic histogram: cumulative counts per upper bound, ascending, ending with +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclasses.dataclass(frozen=True)
class Sample:
    """The needed series of one scrape, summed across engines.

    `created` maps a histogram or counter name to the earliest `_created` timestamp among its
    label sets: a process restart moves all of them, while a label set created lazily later
    would only add a later one, so the earliest is the stable restart marker. It is empty when
    the server runs with prometheus_client's `_created` series disabled. `model_name` is the
    served model name (vLLM labels every series with one; several would be comma-joined).
    """

    model_name: str
    histograms: Mapping[str, Histogram]
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    created: Mapping[str, float]
    # Why series were left out as missing (an implausible value), one sentence each.
    ignored: tuple[str, ...] = ()
    engine: str = "vllm"  # whose names the scrape used (spec.engine's values)


def _created_name(name: str) -> str:
    return name.removesuffix("_total") + "_created"


_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_WANTED = frozenset(
    [h + s for h in HISTOGRAMS for s in _HISTOGRAM_SUFFIXES]
    + list(COUNTERS)
    + list(GAUGES)
    + [_created_name(n) for n in HISTOGRAMS + COUNTERS]
)
_CREATED_OF = {_created_name(n): n for n in HISTOGRAMS + COUNTERS}


def _renames() -> dict[str, tuple[str, str]]:
    """Every exposed sample name of another engine -> (its vLLM name, the engine)."""
    out = {}
    for engine, names in ENGINE_NAMES.items():
        for theirs, ours in names.items():
            out[theirs] = (ours, engine)
            if ours in HISTOGRAMS:
                out.update({theirs + s: (ours + s, engine) for s in _HISTOGRAM_SUFFIXES})
            if ours in HISTOGRAMS + COUNTERS:
                out[_created_name(theirs)] = (_created_name(ours), engine)
    return out


_RENAMES = _renames()


def _wanted_lines(text: str) -> list[str]:
    return _engine_lines(text)[0]


def _engine_lines(text: str) -> tuple[list[str], str]:
    """The wanted lines, in vLLM's names, and the engine whose names they were in."""
    kept = []
    engine = "vllm"
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for stop in ("{", " "):
            i = line.find(stop, 0, end)
            if i != -1:
                end = i
        if line[:end] in _WANTED:
            kept.append(line)
        elif line[:end] in _RENAMES:
            ours, engine = _RENAMES[line[:end]]
            kept.append(ours + line[end:])
    return kept, engine


# `name{label="value",...} value`: the one shape vLLM 0.32 gives every series we read. Lines
# in it are split here; any other line (escaped quotes, a timestamp, no labels) goes to
# prometheus_client's parser, which also does the erroring. Why bother: over the ~115 kept
# lines prometheus_client spends ~4 ms per scrape, 2 s of CPU per cycle at 500 pods, in the
# operator's event loop; this split costs a fraction of that (bench/bench_collector.py).
_SIMPLE_LINE = re.compile(r'([^{ ]+)\{((?:[a-zA-Z_]\w*="[^"\\]*",?)*)\} (\S+)')
_LABEL = re.compile(r'([a-zA-Z_]\w*)="([^"\\]*)"')


def _samples(lines: list[str]) -> Iterator[tuple[str, Mapping[str, str], float]]:
    for line in lines:
        match = _SIMPLE_LINE.fullmatch(line)
        if match is not None:
            try:
                value = float(match[3])  # also takes Prometheus' +Inf, -Inf and NaN
            except ValueError:
                pass
            else:
                yield match[1], dict(_LABEL.findall(match[2])), value
                continue
        try:
            for family in parser.text_string_to_metric_families(line + "\n"):
                for sample in family.samples:
                    yield sample.name, sample.labels, sample.value
        except ValueError as error:
            raise NotPrometheusText(_one_line(f"not Prometheus text: {error}")) from None


def _one_line(message: str, limit: int = 120) -> str:
    # The parser quotes the offending line, which may be long or multi-line (an HTML page).
    first = message.splitlines()[0] if message else message
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _classify_unusable(text: str) -> MetricsError:
    """Say why a body without the wanted series is unusable: garbage, or someone else's metrics."""
    try:
        for _ in parser.text_string_to_metric_families(text):
            pass
    except ValueError as error:  # the parser's only signal for malformed input
        return NotPrometheusText(_one_line(f"not Prometheus text: {error}"))
    return NotVllmMetrics("no vLLM series (vllm:time_to_first_token_seconds, ...) found")


def parse(text: str) -> Sample:
    """Parse one scrape; raise NotPrometheusText or NotVllmMetrics when it cannot be used."""
    lines, engine = _engine_lines(text)
    if not lines:
        raise _classify_unusable(text)
    required = REQUIRED[engine]
    buckets: dict[str, dict[float, float]] = {name: {} for name in HISTOGRAMS}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    engines: dict[str, int] = {}  # series summed into each gauge
    created: dict[str, float] = {}
    models: set[str] = set()
    seen: set[str] = set()  # series present, whatever their values
    has_inf: set[str] = set()  # histograms with a +Inf bucket line
    bad: dict[str, str] = {}  # series -> why its value is unusable
    for name, labels, value in _samples(lines):
        if "model_name" in labels:
            models.add(labels["model_name"])
        if name.endswith("_bucket"):
            key = name.removesuffix("_bucket")
            seen.add(key)
            le = _upper_bound(labels.get("le"), name)
            if le == math.inf:
                has_inf.add(key)
            elif not 0 <= le <= MAX_BUCKET_BOUND_S:  # also NaN
                # A bucket bound that is no latency; the cumulative counts above still hold it.
                bad.setdefault(f"{name}{{le={labels.get('le')!r}}}", "bucket bound is not a latency")
                continue
            if _implausible(value, 0.0, MAX_COUNT):
                bad.setdefault(key, f"bucket le={labels.get('le')} has count {value!r}")
                continue
            per_le = buckets[key]
            per_le[le] = per_le.get(le, 0.0) + value
        elif name.endswith("_sum") or name.endswith("_count"):
            key, part = name.rsplit("_", 1)
            if part == "count":
                seen.add(key)
            if _implausible(value, 0.0, MAX_COUNT):
                bad.setdefault(key, f"_{part} is {value!r}")
                continue
            into = sums if part == "sum" else counts
            into[key] = into.get(key, 0.0) + value
        elif name in _CREATED_OF:
            if _implausible(value, *_CREATED_RANGE):
                bad.setdefault(name, f"is {value!r}")
                continue
            key = _CREATED_OF[name]
            created[key] = min(created.get(key, value), value)
        elif name in GAUGES:
            seen.add(name)
            if _implausible(value, *_GAUGE_RANGES[name]):
                bad.setdefault(name, f"is {value!r}")
                continue
            gauges[name] = gauges.get(name, 0.0) + value
            engines[name] = engines.get(name, 0) + 1
        else:
            seen.add(name)
            if _implausible(value, 0.0, MAX_COUNT):
                bad.setdefault(name, f"is {value!r}")
                continue
            counters[name] = counters.get(name, 0.0) + value
    if engines.get(KV_CACHE_USAGE, 0) > 1:
        # Each engine of a pod (data parallel) has a KV cache of its own: the pod's usage is their
        # mean, a fraction like each of them (requests and queues add up; fractions do not).
        gauges[KV_CACHE_USAGE] /= engines[KV_CACHE_USAGE]
    missing = [_their_name(n, engine) for n in required if n not in seen]
    if missing:
        raise NotVllmMetrics(f"{ENGINE_LABELS[engine]} series missing: {', '.join(missing)}")
    for name in HISTOGRAMS:
        if name in seen and name not in has_inf:
            raise NotVllmMetrics(f"{_their_name(name, engine)} has no +Inf bucket")
    histograms = {}
    for name in HISTOGRAMS:
        if name not in seen:  # a series this engine does not expose (REQUIRED): missing, not broken
            continue
        if name in bad or name not in counts or math.inf not in buckets[name]:
            bad.setdefault(name, "incomplete")  # a histogram is whole or missing
            continue
        # Engines summed: a sum over several engines could still exceed the limits.
        if sums.get(name, 0.0) > MAX_COUNT or counts[name] > MAX_COUNT:
            bad[name] = "sum or count beyond any plausible value"
            continue
        ordered = tuple(sorted(buckets[name].items()))
        histograms[name] = Histogram(ordered, sums.get(name, 0.0), counts[name])
    return Sample(
        model_name=",".join(sorted(models)),
        histograms=histograms,
        counters=counters,
        gauges=gauges,
        created=created,
        ignored=tuple(f"{name} {why}: treated as missing" for name, why in sorted(bad.items())),
        engine=engine,
    )


def _their_name(name: str, engine: str) -> str:
    """A series' name as `engine` exposes it, for messages."""
    return next((theirs for theirs, ours in ENGINE_NAMES.get(engine, {}).items() if ours == name), name)


def load_gauges(text: str) -> dict[str, float]:
    """Only the scheduler gauges (GAUGES) of a scrape, summed over a pod's engines like `parse`'s
    (KV-cache use their mean); implausible values are left out. For a scrape filtered to them
    (vLLM's `name[]`), which `parse` refuses for lacking the histograms."""
    gauges: dict[str, float] = {}
    engines: dict[str, int] = {}
    for name, _, value in _samples(_wanted_lines(text)):
        if name in _GAUGE_RANGES and not _implausible(value, *_GAUGE_RANGES[name]):
            gauges[name] = gauges.get(name, 0.0) + value
            engines[name] = engines.get(name, 0) + 1
    if engines.get(KV_CACHE_USAGE, 0) > 1:
        gauges[KV_CACHE_USAGE] /= engines[KV_CACHE_USAGE]
    return gauges


def _implausible(value: float, low: float, high: float) -> bool:
    return not low <= value <= high  # also NaN


def _upper_bound(le: str | None, name: str) -> float:
    try:
        return float(le)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise NotPrometheusText(f"{name} has a bad le label: {le!r}") from None
