"""GPU-hour prices: which price applies to a GPU product, and where it came from.

Prices move every few months and differ by provider, so logic never hard-codes them: a price comes
from the InferenceDeployment (`spec.pricing.gpuHourUSD`), else from the cluster's pricing table
(keyed by NVIDIA GPU Feature Discovery product string), else from the default table below. The
caller reports the source next to every cost so a reader knows how much to trust it.

The default table is a rough on-demand figure per GPU-hour from "specialty" GPU clouds in 2025-26,
not a quote. Sources (checked 2026):
- A100 80GB, H100 SXM, H200: mercatus-ai.com/blog/cloud-gpu-pricing, specialty-cloud tier
  (A100 80GB $1.10-1.50, H100 SXM5 $2.50-3.50, H200 $3.50-4.50); we take the low end.
- H100 $2.49: Lambda's listed on-demand H100 price, quoted by
  computespec.pages.dev/learn/pricing/cloud-gpu-pricing-explained.
- A10G $1.006: AWS g5.xlarge on-demand (1x A10G), see ../shared/design/GPU-FACTS.md.
- A100 40GB $4.10: AWS p4d.24xlarge $32.77/h over 8 GPUs (GPU-FACTS.md).
- Others (H100 PCIe, L40S, L4, B200, GB200): estimates scaled from the above; override them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from shardwise.api import v1alpha1 as api

# USD per GPU-hour, keyed by canonical GFD product string (see the module docstring for sources).
DEFAULT_GPU_HOUR_USD: Mapping[str, float] = {
    "NVIDIA-A10G": 1.006,
    "NVIDIA-A100-80GB-PCIe": 1.30,
    "NVIDIA-A100-SXM4-40GB": 4.10,
    "NVIDIA-A100-SXM4-80GB": 1.50,
    "NVIDIA-B200": 5.50,
    "NVIDIA-GB200": 6.50,
    "NVIDIA-H100-80GB-HBM3": 2.49,
    "NVIDIA-H100-PCIe": 2.00,
    "NVIDIA-H200": 3.50,
    "NVIDIA-L4": 0.80,
    "NVIDIA-L40S": 1.00,
}

# What an unknown product costs when nobody said: a mid-range figure, so cost comparisons between
# known products stay meaningful and the unknown one is flagged by its "default" source.
UNKNOWN_GPU_HOUR_USD = 2.00

# No GPU-hour costs this much (a GB200 rents for a few dollars): a price above it is a typo or a
# unit mix-up (cents, per month), and would make every cost figure meaningless. The CRD's price
# pattern allows the same digits.
MAX_GPU_HOUR_USD = 10.0**api.GPU_HOUR_USD_INTEGER_DIGITS

_SHARING_SUFFIX = re.compile(r"-(SHARED|MIG-.*)$", re.IGNORECASE)
_VENDOR_PREFIX = re.compile(r"^(NVIDIA|TESLA)-", re.IGNORECASE)


def normalize_product(product: str) -> str:
    """Reduce a GFD product string to a comparison key.

    GFD appends `-SHARED` under time-slicing/MPS and `-MIG-<profile>` under single-strategy MIG, and
    older drivers omit the `NVIDIA-` prefix (`A100-SXM4-40GB`): none of that changes the price.
    """
    key = _SHARING_SUFFIX.sub("", product.strip())
    key = _VENDOR_PREFIX.sub("", key)
    return re.sub(r"[^a-z0-9]", "", key.lower())


def _lookup(product: str, table: Mapping[str, float]) -> float | None:
    """The table's valid price for `product`; an invalid entry counts as no entry."""
    if product in table:
        return _valid_or_none(table[product])
    wanted = normalize_product(product)
    for name in sorted(table):
        if normalize_product(name) == wanted:
            return _valid_or_none(table[name])
    return None


def _valid_or_none(value: object) -> float | None:
    try:
        return parse_price(value)  # type: ignore[arg-type]
    except ValueError:
        return None


def parse_price(value: str | float | int) -> float:
    """Parse a price written as a number or a string such as "2.49" or "$2.49".

    Raises ValueError, with a sentence, for anything that is not a finite price from 0 to
    MAX_GPU_HOUR_USD: NaN, infinities and negative prices would reach every cost figure.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a price: {value!r}")
    text = str(value).strip().lstrip("$")
    try:
        price = float(text)
    except ValueError:
        raise ValueError(f"not a price: {value!r}") from None
    if not 0 <= price <= MAX_GPU_HOUR_USD:  # also rejects NaN
        raise ValueError(
            f"price must be a number from 0 to {MAX_GPU_HOUR_USD:g} USD per GPU-hour, got {value!r}"
        )
    return price


def price_table(raw: Mapping[object, object]) -> tuple[dict[str, float], list[str]]:
    """A pricing table (GFD product -> USD per GPU-hour) from raw data, and a sentence per entry
    left out because its price is not a valid one."""
    prices: dict[str, float] = {}
    problems: list[str] = []
    for product, value in raw.items():
        try:
            prices[str(product)] = parse_price(value)  # type: ignore[arg-type]
        except ValueError as error:
            problems.append(f"{product}: {error}; ignored")
    return prices, problems


def resolve_gpu_hour_price(
    product: str,
    spec_price: str | float | None = None,
    cluster_prices: Mapping[str, float] | None = None,
) -> tuple[float, str]:
    """Return (USD per GPU-hour, source), source being "spec", "cluster" or "default"."""
    if spec_price is not None:
        return parse_price(spec_price), "spec"
    if cluster_prices:
        found = _lookup(product, cluster_prices)
        if found is not None:
            return found, "cluster"
    found = _lookup(product, DEFAULT_GPU_HOUR_USD)
    return (found if found is not None else UNKNOWN_GPU_HOUR_USD), "default"
