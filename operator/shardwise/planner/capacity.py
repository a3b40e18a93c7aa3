"""Can a planned replica be scheduled right now, and if not, what has to be freed.

Plans are made against total capacity, so a busy cluster does not flip a deployment to a worse
layout (plan stability); this module only reports the gap between the plan and the free GPUs now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from shardwise.planner import inventory, placement

_NAME = attrgetter("name")
_FREE = attrgetter("free_gpus")


def _most_free(nodes: Sequence[inventory.NodeState]) -> list[inventory.NodeState]:
    """Most free GPUs first, then by name: two stable C-keyed sorts instead of one tuple key per
    node (a pool's nodes come sorted by name, which the first sort then only confirms)."""
    ranked = sorted(nodes, key=_NAME)
    ranked.sort(key=_FREE, reverse=True)  # reverse keeps equal keys in order, as -free would
    return ranked


def _names(nodes: Sequence[inventory.NodeState], limit: int = 3) -> str:
    shown = ", ".join(n.name for n in nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def _blocked_note(nodes: Sequence[inventory.NodeState]) -> str:
    blocked = [n for n in nodes if n.blocked]
    if not blocked:
        return ""
    return f"; {len(blocked)} matching node(s) cordoned or NotReady ({_names(blocked)})"


def check(
    nodes: Sequence[inventory.NodeState], *, nodes_needed: int, gpus_per_node: int, one_clique: bool
) -> tuple[bool, str]:
    """(schedulable now, message) for a replica of `nodes_needed` pods of `gpus_per_node` GPUs."""
    if one_clique:
        by_clique: dict[str, list[inventory.NodeState]] = {}
        for n in nodes:
            if n.clique:
                by_clique.setdefault(n.clique, []).append(n)
        best: tuple[bool, str] | None = None
        best_count = -1
        for clique in sorted(by_clique):
            members = by_clique[clique]
            count = sum(1 for n in members if n.free_gpus >= gpus_per_node)
            if count > best_count:
                best_count = count
                ok, message = check(
                    members,
                    nodes_needed=nodes_needed,
                    gpus_per_node=gpus_per_node,
                    one_clique=False,
                )
                best = ok, f"within NVLink clique {clique}: {message}"
        return best if best else (False, "no nodes share an NVLink clique")

    ranked = _most_free(nodes)
    ready = [n for n in ranked if n.free_gpus >= gpus_per_node]
    if nodes_needed == 1:
        if ready:
            return True, f"{gpus_per_node} free GPUs now on {_names(ready)}"
        top = ranked[0]
        return False, (
            f"needs {gpus_per_node} free GPUs on one node; most free now is {top.free_gpus} on "
            f"{top.name}; fits when {gpus_per_node - top.free_gpus} more are freed"
            + _blocked_note(nodes)
        )
    if len(ready) >= nodes_needed:
        return (
            True,
            f"{nodes_needed} nodes with {gpus_per_node} free GPUs each now: {_names(ready)}",
        )
    short = ranked[len(ready) : nodes_needed]
    missing = sum(gpus_per_node - n.free_gpus for n in short)
    have = f"{len(ready)} ha{'s' if len(ready) == 1 else 've'} that now"
    if ready:
        have += f" ({_names(ready)})"
    return False, (
        f"needs {nodes_needed} nodes with {gpus_per_node} free GPUs each; {have}; fits when "
        f"{missing} more are freed on {_names(short)}" + _blocked_note(nodes)
    )


def usable_nodes(
    inv: inventory.Inventory,
    *,
    product: str,
    node_selector: Mapping[str, str],
    tolerations: Sequence[placement.Toleration],
) -> list[inventory.NodeState]:
    """Nodes of the planned product that this deployment's pods may use: the node selector
    matches and every blocking taint is tolerated (the planner's own eligibility rules)."""
    selector = tuple(sorted(node_selector.items()))
    found: list[inventory.NodeState] = []
    for pool in inv.pools:
        if pool.shape.product != product:
            continue
        if placement.untolerated_taints(pool.taints, tolerations):
            continue
        found.extend(placement.matching_nodes(pool.nodes, selector))
    return found


def replica_slots(
    nodes: Sequence[inventory.NodeState], *, gpus_per_node: int, nodes_per_replica: int
) -> int:
    """Whole replicas the free GPUs of `nodes` hold: pods of `gpus_per_node` per node, then
    `nodes_per_replica` of those per replica (a node never hosts two pods of one replica beyond
    what fits, and cliques are not checked: an upper bound for NVLink-fabric plans)."""
    if gpus_per_node < 1:
        return 0
    pods = sum(n.free_gpus // gpus_per_node for n in nodes)
    return pods // max(1, nodes_per_replica)
