"""Status fields for latency and cost, and the decision whether to write them.

GitOps tools and watchers see every status write, so figures are rounded to what is
meaningful (three significant digits for latencies and rates, cents for $/hour) and a write is
skipped unless a figure moved beyond a threshold, appeared or disappeared. Identical inputs
give identical dicts, so a reconcile that observes nothing new writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shardwise.observe.aggregate import Summary
from shardwise.observe.cost import Cost


def _sig(value: float, digits: int = 3) -> float:
    if value == 0 or not math.isfinite(value):
        return 0.0 if value == 0 else value
    return float(f"{value:.{digits}g}") + 0.0  # + 0.0 turns -0.0 into 0.0


def _window(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def status_latency(summary: Summary) -> dict[str, Any]:
    """`status.latency`: figures absent (not null) when there is nothing to report."""
    figures = {
        "ttftP50Ms": summary.ttft_p50_ms,
        "ttftP95Ms": summary.ttft_p95_ms,
        "ttftP99Ms": summary.ttft_p99_ms,
        "itlP50Ms": summary.itl_p50_ms,
        "itlP95Ms": summary.itl_p95_ms,
        "e2eP95Ms": summary.e2e_p95_ms,
        "queueP95Ms": summary.queue_p95_ms,
        "queueMeanMs": summary.queue_mean_ms,
        "requestsPerSecond": summary.requests_per_second,
        "promptTokensPerSecond": summary.prompt_tokens_per_second,
        "outputTokensPerSecond": summary.output_tokens_per_second,
        "kvCacheUsage": summary.kv_cache_usage,
    }
    out: dict[str, Any] = {"window": _window(summary.window_seconds)}
    # A figure that is not a finite number is left out like a missing one: the status is JSON, and
    # the aggregation already drops such values, so this only guards Summaries built elsewhere.
    out.update({k: _sig(v) for k, v in figures.items() if v is not None and math.isfinite(v)})
    # Request gauges are whole numbers. Window counts are left out: they move every cycle
    # and the rates already say the same without forcing a write each time.
    if summary.running is not None and math.isfinite(summary.running):
        out["running"] = round(summary.running)
    if summary.waiting is not None and math.isfinite(summary.waiting):
        out["waiting"] = round(summary.waiting)
    return out


def status_cost(cost: Cost) -> dict[str, Any]:
    """`status.cost`: $/hour to the cent; $/1M tokens to three significant digits, because
    it spans orders of magnitude (a cent would round a cheap model to zero)."""
    out: dict[str, Any] = {
        "gpuHoursPerHour": _sig(cost.gpu_hours_per_hour),
        "hourlyUSD": round(cost.hourly_usd, 2) + 0.0,
        "priceSource": cost.price_source,
    }
    if cost.per_million_output_tokens_usd is not None:
        out["perMillionOutputTokensUSD"] = _sig(cost.per_million_output_tokens_usd)
    if cost.per_million_total_tokens_usd is not None:
        out["perMillionTotalTokensUSD"] = _sig(cost.per_million_total_tokens_usd)
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _moved(old: Any, new: Any, relative_threshold: float) -> bool:
    numbers = (int, float)
    if isinstance(old, numbers) and isinstance(new, numbers) and not isinstance(old, bool):
        scale = max(abs(old), abs(new))
        return scale > 0 and abs(new - old) / scale > relative_threshold
    return bool(old != new)


def should_write(
    previous: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    last_write: float,
    now: float,
    *,
    min_interval_s: float,
    relative_threshold: float,
    refresh_s: float | None = None,
) -> bool:
    """Whether to write `new` over `previous` (nested dicts compared figure by figure).

    Never for identical content; otherwise at most once per `min_interval_s`, when a figure
    appears, disappears, changes non-numerically or moves by more than `relative_threshold`
    of its magnitude. With `refresh_s` (typically the window), any change is written once that
    long has passed, so slow drift still reaches the status when the window rolls.
    """
    if previous is not None and dict(previous) == dict(new):
        return False
    if previous is None:
        return True
    elapsed = now - last_write
    if elapsed < min_interval_s:
        return False
    if refresh_s is not None and elapsed >= refresh_s:
        return True
    old, cur = _flatten(previous), _flatten(new)
    if old.keys() != cur.keys():
        return True
    return any(_moved(old[k], cur[k], relative_threshold) for k in cur)
