"""What the search weighs: a node pool the spec may use, and one scored layout on it.

Plain data shared by the search (which builds and ranks them) and the reasons (which explain
the choice), so neither imports the other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from shardwise.planner import inventory, layouts, memory, performance, plans


@dataclass(frozen=True)
class Eligible:
    """A pool and those of its nodes the spec may use."""

    pool: inventory.NodePool
    nodes: tuple[inventory.NodeState, ...]

    @property
    def shape(self) -> inventory.GpuShape:
        return self.pool.shape

    @property
    def largest_clique(self) -> int:
        counts = Counter(n.clique for n in self.nodes if n.clique)
        return max(counts.values(), default=0)


@dataclass(frozen=True)
class Candidate:
    eligible: Eligible
    layout: layouts.Layout
    fit: memory.MemoryFit
    prediction: performance.Prediction
    hourly_usd: float
    price_source: str
    correction: plans.Correction | None = None

    @property
    def shape(self) -> inventory.GpuShape:
        return self.eligible.shape

    @property
    def per_million_usd(self) -> float:
        return self.hourly_usd / (self.prediction.tokens_per_s * 3600) * 1e6

    @property
    def tokens_per_gpu(self) -> float:
        return self.prediction.tokens_per_s / self.layout.gpus

    @property
    def identity(self) -> tuple[str, int, int, int, str, bool, int, bool]:
        lay = self.layout
        return (
            self.shape.product,
            lay.tp,
            lay.pp,
            lay.nodes,
            self.shape.interconnect,
            lay.tp_spans_nodes,
            lay.dp,
            lay.ep,
        )

    def tie_break(self) -> tuple[str, int, int, int, str, int, bool]:
        lay = self.layout
        return (self.shape.product, lay.gpus, -lay.tp, lay.nodes, self.eligible.nodes[0].name,
                lay.dp, lay.ep)
