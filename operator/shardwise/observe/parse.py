"""Parse one vLLM `/metrics` scrape into a compact `Sample` of the series shardwise needs.

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


def _wanted_lines(text: str) -> list[str]:
    kept = []
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
    return kept


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
    lines = _wanted_lines(text)
    if not lines:
        raise _classify_unusable(text)
    buckets: dict[str, dict[float, float]] = {name: {} for name in HISTOGRAMS}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    created: dict[str, float] = {}
    models: set[str] = set()
    for name, labels, value in _samples(lines):
        if "model_name" in labels:
            models.add(labels["model_name"])
        if name.endswith("_bucket"):
            per_le = buckets[name.removesuffix("_bucket")]
            le = _upper_bound(labels.get("le"), name)
            per_le[le] = per_le.get(le, 0.0) + value
        elif name.endswith("_sum"):
            key = name.removesuffix("_sum")
            sums[key] = sums.get(key, 0.0) + value
        elif name.endswith("_count"):
            key = name.removesuffix("_count")
            counts[key] = counts.get(key, 0.0) + value
        elif name in _CREATED_OF:
            key = _CREATED_OF[name]
            created[key] = min(created.get(key, value), value)
        elif name in GAUGES:
            gauges[name] = gauges.get(name, 0.0) + value
        else:
            counters[name] = counters.get(name, 0.0) + value
    missing = [n for n in HISTOGRAMS if not buckets[n] or n not in counts]
    missing += [n for n in COUNTERS + GAUGES if n not in counters and n not in gauges]
    if missing:
        raise NotVllmMetrics(f"vLLM series missing: {', '.join(missing)}")
    histograms = {}
    for name in HISTOGRAMS:
        ordered = tuple(sorted(buckets[name].items()))
        if not math.isinf(ordered[-1][0]):
            raise NotVllmMetrics(f"{name} has no +Inf bucket")
        histograms[name] = Histogram(ordered, sums.get(name, 0.0), counts[name])
    return Sample(
        model_name=",".join(sorted(models)),
        histograms=histograms,
        counters=counters,
        gauges=gauges,
        created=created,
    )


def _upper_bound(le: str | None, name: str) -> float:
    try:
        return float(le)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise NotPrometheusText(f"{name} has a bad le label: {le!r}") from None
