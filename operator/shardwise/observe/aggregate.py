"""Turn per-pod scrapes into windowed fleet figures: deltas, PromQL quantiles, a sliding window.

Pure: no clock, no I/O. Times are passed in, so the shell decides what "now" is and tests use
virtual time.

Aggregation follows what `histogram_quantile(q, sum by (le) (increase(x_bucket[5m])))` does in
Prometheus: per-pod increases (with counter resets handled), summed per bucket across pods,
then the quantile. Fleet rates are the sum of per-pod rates, as `sum(rate(x[5m]))` is, so a pod
that joined a minute ago counts at its own pace rather than diluted over the whole window.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

from shardwise.observe import parse
from shardwise.observe.parse import Histogram, Sample

# Prometheus' smallDeltaTolerance: bucket differences this small (relative) are float noise.
_SMALL_DELTA_TOLERANCE = 1e-12


@dataclasses.dataclass(frozen=True)
class Delta:
    """What one pod did between two scrapes (or over a window).

    `reset` says why the earlier scrape was discarded (the pod restarted) and the later one
    taken as the increase since the restart; None when the counters simply continued.
    `seconds` is the time the increase accrued over, when known (rates need it).
    """

    histograms: Mapping[str, Histogram]
    counters: Mapping[str, float]
    reset: str | None = None
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class Summary:
    """Fleet figures over a window. Quantiles are None when there were no observations.

    `kv_cache_usage` is the mean across pods: replicas of one deployment have equal KV caches,
    so the mean is the fraction of the fleet's KV cache in use; `running` and `waiting` are sums.
    `pods` counts the pods whose gauges are current (scraped recently).
    """

    window_seconds: float
    pods: int
    requests: float
    prompt_tokens: float
    output_tokens: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    e2e_p95_ms: float | None
    queue_p95_ms: float | None
    requests_per_second: float | None
    prompt_tokens_per_second: float | None
    output_tokens_per_second: float | None
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    # vLLM's lowest queue-time bucket is 0.3 s, so the PromQL p95 of near-zero queues reads as
    # ~285 ms (interpolation inside the first bucket); the mean (sum / count) tells the truth.
    queue_mean_ms: float | None = None
    # Means (sum / count) are what the planner predicts; quantiles of coarse buckets are not.
    ttft_mean_ms: float | None = None
    itl_mean_ms: float | None = None
    e2e_mean_ms: float | None = None


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """PromQL's histogram_quantile over classic buckets (upper bound, cumulative count).

    Mirrors BucketQuantile in prometheus/promql/quantile.go: NaN without a +Inf bucket, with
    fewer than two buckets or with no observations; -Inf for q < 0 and +Inf for q > 1; the
    upper bound of the highest finite bucket when the rank falls in +Inf; interpolation from 0
    in the lowest bucket unless its upper bound is <= 0; buckets with equal bounds merged and
    decreasing counts flattened.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets, key=lambda b: b[0])
    if not ordered or not math.isinf(ordered[-1][0]):
        return math.nan
    merged: list[list[float]] = []
    for bound, count in ordered:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    _ensure_monotonic(merged)
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    counts = [c for _, c in merged[:-1]]
    b = bisect.bisect_left(counts, rank)  # first bucket with count >= rank, as sort.Search
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[b][0], merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    if count == 0:  # q == 0 over an empty lowest bucket: Go's 0/0
        return math.nan
    return start + (end - start) * (rank / count)


def _ensure_monotonic(buckets: list[list[float]]) -> None:
    prev = buckets[0][1]
    for bucket in buckets[1:]:
        curr = bucket[1]
        if curr == prev:
            continue
        if _almost_equal(prev, curr) or curr < prev:
            bucket[1] = prev  # keep prev: the dip or the noise is ignored
            continue
        prev = curr


def _almost_equal(a: float, b: float) -> bool:
    """Go's prometheus/util/almost.Equal with the small-delta tolerance."""
    min_normal = 2.2250738585072014e-308
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < min_normal:
        return diff < _SMALL_DELTA_TOLERANCE * min_normal
    return diff / min(abs_sum, 1.7976931348623157e308) < _SMALL_DELTA_TOLERANCE


def _reset_reason(before: Sample, after: Sample) -> str | None:
    for name, t in after.created.items():
        if name in before.created and before.created[name] != t:
            return f"{name} was re-created (the server restarted)"
    for name, value in after.counters.items():
        if value < before.counters.get(name, 0.0):
            return f"{name} went backwards ({before.counters[name]:g} -> {value:g})"
    for name, h in after.histograms.items():
        old = before.histograms.get(name)
        if old is None:
            continue
        if h.count < old.count:
            return f"{name} count went backwards ({old.count:g} -> {h.count:g})"
        if h.sum < old.sum:  # observed latencies are never negative: only a restart lowers it
            return f"{name} sum went backwards ({old.sum:g} -> {h.sum:g})"
        if [b for b, _ in h.buckets] != [b for b, _ in old.buckets]:
            return f"{name} bucket bounds changed"
        if any(n < o for (_, n), (_, o) in zip(h.buckets, old.buckets, strict=True)):
            return f"{name} buckets went backwards"
    return None


def delta(before: Sample, after: Sample) -> Delta:
    """The increase from `before` to `after`; after a restart, everything `after` has counted."""
    reason = _reset_reason(before, after)
    if reason is not None:
        return Delta(dict(after.histograms), dict(after.counters), reset=reason)
    histograms = {
        name: _histogram_minus(h, before.histograms[name]) if name in before.histograms else h
        for name, h in after.histograms.items()
    }
    counters = {name: v - before.counters.get(name, 0.0) for name, v in after.counters.items()}
    return Delta(histograms, counters)


def _histogram_minus(a: Histogram, b: Histogram) -> Histogram:
    if len(a.buckets) == len(b.buckets) and all(
        x[0] == y[0] for x, y in zip(a.buckets, b.buckets, strict=True)
    ):  # the usual case, same vLLM bucket layout: a plain zip, no dict
        buckets = tuple((x[0], x[1] - y[1]) for x, y in zip(a.buckets, b.buckets, strict=True))
    else:
        old = dict(b.buckets)
        buckets = tuple((bound, count - old.get(bound, 0.0)) for bound, count in a.buckets)
    return Histogram(buckets, a.sum - b.sum, a.count - b.count)


def _histogram_plus(a: Histogram, b: Histogram) -> Histogram:
    if len(a.buckets) == len(b.buckets) and all(
        x[0] == y[0] for x, y in zip(a.buckets, b.buckets, strict=True)
    ):
        buckets = tuple((x[0], x[1] + y[1]) for x, y in zip(a.buckets, b.buckets, strict=True))
    else:
        # Summed per upper bound like `sum by (le)`: a bound missing on one side adds nothing.
        merged = dict(a.buckets)
        for bound, count in b.buckets:
            merged[bound] = merged.get(bound, 0.0) + count
        buckets = tuple(sorted(merged.items()))
    return Histogram(buckets, a.sum + b.sum, a.count + b.count)


def _plus(a: Delta, b: Delta) -> Delta:
    histograms = dict(a.histograms)
    for name, h in b.histograms.items():
        histograms[name] = _histogram_plus(histograms[name], h) if name in histograms else h
    counters = dict(a.counters)
    for name, v in b.counters.items():
        counters[name] = counters.get(name, 0.0) + v
    return Delta(histograms, counters)


def _minus(a: Delta, b: Delta) -> Delta:
    histograms = {
        name: _histogram_minus(h, b.histograms[name]) if name in b.histograms else h
        for name, h in a.histograms.items()
    }
    counters = {name: v - b.counters.get(name, 0.0) for name, v in a.counters.items()}
    return Delta(histograms, counters)


def _ms(q: float, deltas: Delta, name: str) -> float | None:
    h = deltas.histograms.get(name)
    if h is None:
        return None
    value = histogram_quantile(q, h.buckets)
    # PromQL's answer may be NaN, or negative or infinite for bounds no latency has; parse drops
    # such bounds, and a Delta built any other way still gives the status no such figure.
    return _finite(value * 1000.0) if value >= 0 else None


def _mean_ms(deltas: Delta, name: str) -> float | None:
    h = deltas.histograms.get(name)
    if h is None or h.count <= 0:
        return None
    return _finite(h.sum / h.count * 1000.0)


def _finite(value: float | None) -> float | None:
    """A figure for the status, or None: a ratio of tiny numbers may still overflow."""
    return value if value is not None and math.isfinite(value) else None


def summarize(
    deltas: Sequence[Delta], window_seconds: float, gauges: Sequence[Mapping[str, float]]
) -> Summary:
    """Fleet figures from per-pod deltas and per-pod current gauges (one mapping per live pod).

    Rates are the sum of each delta's own rate; deltas without `seconds` add to the counts only.
    """
    total = merge(deltas)
    timed = [(d.seconds, d.counters) for d in deltas if d.seconds and d.seconds > 0]

    def rate(name: str) -> float | None:
        if not timed:
            return None
        return _finite(sum(counters.get(name, 0.0) / seconds for seconds, counters in timed))

    def gauge_sum(name: str) -> float | None:
        values = [g[name] for g in gauges if name in g]
        return _finite(sum(values)) if values else None

    kv = [g[parse.KV_CACHE_USAGE] for g in gauges if parse.KV_CACHE_USAGE in g]
    return Summary(
        window_seconds=window_seconds,
        pods=len(gauges),
        requests=total.counters.get(parse.REQUESTS, 0.0),
        prompt_tokens=total.counters.get(parse.PROMPT_TOKENS, 0.0),
        output_tokens=total.counters.get(parse.OUTPUT_TOKENS, 0.0),
        ttft_p50_ms=_ms(0.50, total, parse.TTFT),
        ttft_p95_ms=_ms(0.95, total, parse.TTFT),
        ttft_p99_ms=_ms(0.99, total, parse.TTFT),
        itl_p50_ms=_ms(0.50, total, parse.ITL),
        itl_p95_ms=_ms(0.95, total, parse.ITL),
        e2e_p95_ms=_ms(0.95, total, parse.E2E),
        queue_p95_ms=_ms(0.95, total, parse.QUEUE),
        requests_per_second=rate(parse.REQUESTS),
        prompt_tokens_per_second=rate(parse.PROMPT_TOKENS),
        output_tokens_per_second=rate(parse.OUTPUT_TOKENS),
        running=gauge_sum(parse.RUNNING),
        waiting=gauge_sum(parse.WAITING),
        kv_cache_usage=sum(kv) / len(kv) if kv else None,
        queue_mean_ms=_mean_ms(total, parse.QUEUE),
        ttft_mean_ms=_mean_ms(total, parse.TTFT),
        itl_mean_ms=_mean_ms(total, parse.ITL),
        e2e_mean_ms=_mean_ms(total, parse.E2E),
    )


@dataclasses.dataclass
class _Pod:
    last: Sample
    # (time, increase since this pod was first seen, restarts folded in): a window's increase
    # is then one subtraction, however many scrapes it spans.
    ring: collections.deque[tuple[float, Delta]]


class Window:
    """Per-pod scrapes over a sliding window, summarised on demand.

    A pod's first scrape is a baseline only: what it counted before we saw it is not attributed
    to the window. Gauges come only from pods scraped within `stale_after_s`, so a vanished
    pod stops counting as running work at once, while the requests it served stay in the
    window's counts until they age out. A pod's increase runs from its newest scrape at or
    before `now - window_seconds` (else its first) to its newest, so it spans the window plus at
    most one scrape interval; rates divide by that actual span.
    """

    def __init__(self, window_seconds: float = 300.0, stale_after_s: float = 60.0) -> None:
        self.window_seconds = window_seconds
        self.stale_after_s = stale_after_s
        self._pods: dict[str, _Pod] = {}
        self._next_sweep = -math.inf

    def add(self, pod: str, sample: Sample, t: float) -> Delta | None:
        """Record a scrape taken at `t`; return the increase since the previous one, if any."""
        state = self._pods.get(pod)
        step = None
        if state is None:
            self._pods[pod] = _Pod(sample, collections.deque([(t, Delta({}, {}))]))
        else:
            step = delta(state.last, sample)
            state.last = sample
            state.ring.append((t, _plus(state.ring[-1][1], step)))
        start = t - self.window_seconds
        ring = self._pods[pod].ring
        # Keep the newest entry at or before the window start: it is the baseline.
        while len(ring) > 1 and ring[1][0] <= start:
            ring.popleft()
        if t >= self._next_sweep:
            # Pods that left the window altogether are dropped now and then, not on every add:
            # a sweep is O(pods) and a cycle adds every pod.
            for name in [n for n, p in self._pods.items() if p.ring[-1][0] < start]:
                del self._pods[name]
            self._next_sweep = t + self.stale_after_s
        return step

    def summary(self, now: float, pods: Collection[str] | None = None) -> Summary:
        """`pods`: only these pods' scrapes (a disaggregated role's engines); None: every pod."""
        start = now - self.window_seconds
        deltas = []
        gauges = []
        for pod, state in self._pods.items():
            if pods is not None and pod not in pods:
                continue
            newest_t, newest = state.ring[-1]
            if newest_t < start:
                continue
            base_t, base = state.ring[0]
            for t, d in state.ring:
                if t > start:
                    break
                base_t, base = t, d
            if newest_t > base_t:
                deltas.append(dataclasses.replace(_minus(newest, base), seconds=newest_t - base_t))
            if now - newest_t <= self.stale_after_s:
                gauges.append(state.last.gauges)
        return summarize(deltas, self.window_seconds, gauges)


def merge(deltas: Iterable[Delta]) -> Delta:
    """Sum deltas (per bucket, per counter), as `sum by (le)` does across pods."""
    total = Delta({}, {})
    for d in deltas:
        total = _plus(total, d)
    return total
