"""Topology-aware parallelism planner: TP/PP, GPUs and nodes per replica, predictions, reasons.

Pure: plain data in, plain data out, no I/O and no Kubernetes client (only the CLI module, which is
not imported here, may talk to a cluster). Public API:

    request_from_spec(spec: dict) -> PlanRequest        # raises PlanInputError(field, message)
    inventory_from_nodes(nodes, pods=()) -> Inventory   # Node/Pod objects as dicts
    plan(request, inventory, *, prices=None) -> Plan    # Plan.to_dict() is the JSON contract

Modules: request (spec reading), models/gpus (catalogs, with their YAML data files), inventory
(node pools), placement (selector, taints), layouts (legal TP x PP), memory and performance (the
models, documented with worked examples), search (ranking), reasons (the words), capacity (free GPUs
now), plans (the result and its JSON), allocatable (`plan` as exported: search's plan, naming the
nodes with GPUs by their labels but none allocatable), hfconfig (an architecture from a model's
config.json).
"""

from shardwise.planner.inventory import Inventory, inventory_from_nodes
from shardwise.planner.plans import Plan, Predicted
from shardwise.planner.request import PlanInputError, PlanRequest, request_from_spec
from shardwise.planner.allocatable import plan

__all__ = [
    "Inventory",
    "Plan",
    "PlanInputError",
    "PlanRequest",
    "Predicted",
    "inventory_from_nodes",
    "plan",
    "request_from_spec",
]
