"""GPU facts by GFD product string, from the data file gpus.yaml (one place to check and correct).

Products are matched tolerantly (case, `-SHARED`/`-MIG-*` suffixes, missing `NVIDIA-` prefix)
because GFD spells the same part differently across driver versions and sharing modes. An unknown
product still gets planned, with conservative figures (L4-class bandwidth and compute, no NVLink)
and the memory its node label reports, and the plan says so: refusing would block new hardware.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from shardwise import pricing


@dataclass(frozen=True)
class GpuFacts:
    """Datasheet figures for one GPU product; see gpus.yaml for units and sources."""

    product: str
    memory_mib: int
    memory_bandwidth_gbps: float
    bf16_tflops: float
    nvlink_gbps: float
    pcie_gbps: float
    source: str
    known: bool = True
    fp8_tflops: float = 0.0  # 0: no fp8 tensor cores (fp8 weights run weight-only at the bf16 rate)
    family: str = "unknown"  # ampere | ada | hopper | blackwell: selects fitted efficiencies


# Conservative stand-ins for a product missing from gpus.yaml: an L4's bandwidth and compute,
# PCIe Gen3 x16. Under-promising latency is safer than over-promising it.
_UNKNOWN_BANDWIDTH_GBPS = 300.0
_UNKNOWN_TFLOPS = 100.0
_UNKNOWN_PCIE_GBPS = 16.0

# A node reporting less than this share of the catalog memory exposes MIG slices, not whole GPUs.
_MIG_SLICE_BELOW = 0.75


@functools.cache
def _catalog() -> dict[str, GpuFacts]:
    text = resources.files(__package__).joinpath("gpus.yaml").read_text(encoding="utf-8")
    raw: dict[str, dict[str, object]] = yaml.safe_load(text)
    table: dict[str, GpuFacts] = {}
    for product in sorted(raw):
        entry = raw[product]
        facts = GpuFacts(
            product=product,
            memory_mib=int(entry["memoryMiB"]),  # type: ignore[call-overload]
            memory_bandwidth_gbps=float(entry["memoryBandwidthGBps"]),  # type: ignore[arg-type]
            bf16_tflops=float(entry["bf16Tflops"]),  # type: ignore[arg-type]
            nvlink_gbps=float(entry["nvlinkGBps"]),  # type: ignore[arg-type]
            pcie_gbps=float(entry["pcieGBps"]),  # type: ignore[arg-type]
            source=str(entry["source"]),
            fp8_tflops=float(entry.get("fp8Tflops", 0.0)),  # type: ignore[arg-type]
            family=str(entry.get("family", "unknown")),
        )
        for name in [product, *entry.get("aliases", [])]:  # type: ignore[misc]
            table[pricing.normalize_product(str(name))] = facts
    return table


def known_products() -> list[str]:
    """Canonical product strings in the catalog, sorted."""
    return sorted({facts.product for facts in _catalog().values()})


@functools.lru_cache(maxsize=256)  # called per node; a cluster has a handful of distinct answers
def lookup_gpu(product: str, memory_mib: int | None = None) -> GpuFacts:
    """Facts for a GFD product string; `memory_mib` (the node's gpu.memory label) wins when given.

    Returns facts with `known=False` for products missing from the catalog; their memory must then
    come from the label, and is 0 when that is missing too (such a GPU fits nothing).
    """
    facts = _catalog().get(pricing.normalize_product(product))
    if facts is None:
        return GpuFacts(
            product=product,
            memory_mib=memory_mib or 0,
            memory_bandwidth_gbps=_UNKNOWN_BANDWIDTH_GBPS,
            bf16_tflops=_UNKNOWN_TFLOPS,
            nvlink_gbps=0.0,
            pcie_gbps=_UNKNOWN_PCIE_GBPS,
            source="not in the GPU catalog: conservative figures",
            known=False,
        )
    if not memory_mib or memory_mib == facts.memory_mib:
        return facts
    share = memory_mib / facts.memory_mib
    if share >= _MIG_SLICE_BELOW:
        return GpuFacts(**{**facts.__dict__, "memory_mib": memory_mib})
    # A MIG slice gets a proportional share of the memory system and the SMs.
    return GpuFacts(
        **{
            **facts.__dict__,
            "memory_mib": memory_mib,
            "memory_bandwidth_gbps": facts.memory_bandwidth_gbps * share,
            "bf16_tflops": facts.bf16_tflops * share,
            "fp8_tflops": facts.fp8_tflops * share,
            "nvlink_gbps": 0.0,
        }
    )
