"""Placement rules from the spec: GPU product filter, node selector, taints versus tolerations.

Kubernetes' own semantics, reimplemented on plain data so the planner stays pure: a toleration with
an empty key and operator Exists tolerates everything; an empty effect matches every effect; only
NoSchedule and NoExecute taints keep a pod off a node (PreferNoSchedule is a preference).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from shardwise import pricing

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated_taints(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> list[Taint]:
    """The taints that keep a pod with these tolerations off the node."""
    tolerations = tuple(tolerations)
    return [
        taint
        for taint in taints
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations)
    ]


def product_allowed(product: str, wanted: Iterable[str]) -> bool:
    """True when no products are asked for, or the node's product is one of them (tolerantly)."""
    wanted = tuple(wanted)
    if not wanted:
        return True
    key = pricing.normalize_product(product)
    return any(pricing.normalize_product(w) == key for w in wanted)


def selector_matches(labels: Mapping[str, str], selector: Iterable[tuple[str, str]]) -> bool:
    return all(labels.get(key) == value for key, value in selector)


class _Labelled(Protocol):
    @property
    def labels(self) -> Mapping[str, str]: ...


_N = TypeVar("_N", bound=_Labelled)


def matching_nodes(nodes: tuple[_N, ...], selector: Sequence[tuple[str, str]]) -> tuple[_N, ...]:
    """The nodes whose labels match the selector, in order: `selector_matches` on each node, with
    no per-node work when there is no selector (pools can hold thousands of nodes)."""
    if not selector:
        return nodes
    if len(selector) == 1:
        ((key, value),) = selector
        return tuple(n for n in nodes if n.labels.get(key) == value)
    return tuple(n for n in nodes if selector_matches(n.labels, selector))
