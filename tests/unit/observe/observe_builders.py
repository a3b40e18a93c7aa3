"""Builders of synthetic Samples for observe/ tests (a module, not conftest, so tests can
import them; the name is unique so it cannot collide with other test folders' helpers)."""

from __future__ import annotations

import pathlib

from shardwise.observe import parse
from shardwise.observe.parse import Histogram, Sample

CAPTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu"

# vLLM 0.32's TTFT bucket bounds, reused by the builder so synthetic samples look real.
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, float("inf"))


def histogram(
    per_bucket: dict[float, float], bounds: tuple[float, ...] = TTFT_BOUNDS
) -> Histogram:
    """A histogram from non-cumulative counts per upper bound (missing bounds count 0)."""
    cumulative, running = [], 0.0
    for bound in bounds:
        running += per_bucket.get(bound, 0.0)
        cumulative.append((bound, running))
    total = sum(per_bucket.values())
    finite_sum = sum(b * c for b, c in per_bucket.items() if b != float("inf"))
    return Histogram(tuple(cumulative), finite_sum, total)


def sample(
    ttft: dict[float, float] | None = None,
    requests: float = 0.0,
    output_tokens: float = 0.0,
    created: float = 1000.0,
    running: float = 0.0,
    kv: float = 0.0,
) -> Sample:
    """A Sample whose four histograms all hold `ttft` (enough for aggregation tests)."""
    h = histogram(ttft or {})
    counters = {parse.REQUESTS: requests, parse.PROMPT_TOKENS: 2 * output_tokens,
                parse.OUTPUT_TOKENS: output_tokens}
    return Sample(
        model_name="m",
        histograms={name: h for name in parse.HISTOGRAMS},
        counters=counters,
        gauges={parse.RUNNING: running, parse.WAITING: 0.0, parse.KV_CACHE_USAGE: kv},
        created={name: created for name in parse.HISTOGRAMS + parse.COUNTERS},
    )
