"""What a deployment costs at its observed throughput.

Pure arithmetic on the plan's GPU count, a GPU-hour price and the window's token rates. Where
the price came from (the spec, the cluster pricing ConfigMap, the built-in table) is decided by
the caller and carried through as `price_source`, so the status can say which one was used.
"""

from __future__ import annotations

import dataclasses

_SECONDS_PER_HOUR = 3600.0
_MILLION = 1_000_000.0


@dataclasses.dataclass(frozen=True)
class Cost:
    """Per-million-token prices are None without throughput: the price of nothing is undefined."""

    gpu_hours_per_hour: float
    hourly_usd: float
    per_million_output_tokens_usd: float | None
    per_million_total_tokens_usd: float | None
    price_source: str


def _per_million(hourly_usd: float, tokens_per_s: float | None) -> float | None:
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return hourly_usd / (tokens_per_s * _SECONDS_PER_HOUR) * _MILLION


def cost(
    gpus: int,
    gpu_hour_usd: float,
    price_source: str,
    output_tokens_per_s: float | None,
    total_tokens_per_s: float | None,
) -> Cost:
    """Cost of `gpus` GPUs (all replicas) at `gpu_hour_usd` each, per hour and per token."""
    if gpus < 0 or gpu_hour_usd < 0:
        raise ValueError(f"gpus and price must be >= 0, got {gpus} GPUs at ${gpu_hour_usd}/h")
    hourly = gpus * gpu_hour_usd
    return Cost(
        gpu_hours_per_hour=float(gpus),
        hourly_usd=hourly,
        per_million_output_tokens_usd=_per_million(hourly, output_tokens_per_s),
        per_million_total_tokens_usd=_per_million(hourly, total_tokens_per_s),
        price_source=price_source,
    )
