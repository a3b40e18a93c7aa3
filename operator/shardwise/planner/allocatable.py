"""`plan()` as the package exports it: the search's plan, with the nodes the inventory left out
because Kubernetes cannot allocate their GPUs named in the reason, and what vLLM will load.

The search (search.py) plans on the pools it is given; a node whose labels show GPUs but whose
allocatable `nvidia.com/gpu` is missing or 0 is in no pool (inventory.py), so without this note a
user would see "no GPU nodes" or a plan elsewhere and not know why the node with GPUs was skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from shardwise.planner import inventory, plans, search
from shardwise.planner.request import PlanRequest


def plan(
    request: PlanRequest,
    inv: inventory.Inventory,
    *,
    prices: Mapping[str, float] | None = None,
    learned: Mapping[str, plans.Correction] | None = None,
) -> plans.Plan:
    """search.plan, its reason ending with which nodes had no allocatable GPUs (if any), and what
    vLLM will load (`weights`: the format the memory was counted in, and a spec.model.dtype it
    will not honour)."""
    result = search.plan(request, inv, prices=prices, learned=learned)
    result = dataclasses.replace(result, weights=request.weights.to_dict())
    note = inventory.unallocatable_note(inv)
    if not note:
        return result
    return dataclasses.replace(result, reason=result.reason.rstrip() + note)
