"""When to plan and what the plan is: gather nodes and pods, call the pure planner, keep plans stable.

A plan is recomputed only when the spec's planning inputs change, when a re-plan is asked for with
the `shardwise.io/replan` annotation, or when the current plan can no longer be placed because the
nodes it needs are gone; an unrelated node joining or leaving never moves a running model.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shardwise import planner
from shardwise.api import lora
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.planner import hfconfig
from shardwise.planner.models import ModelArch, lookup_model
from shardwise.render.labels import INSTANCE_LABEL, REPLAN_ANNOTATION


def planning_fingerprint(spec: InferenceDeploymentSpec) -> str:
    """Hash of the spec fields that change a plan (not replicas, image, extraArgs or autoscaling)."""
    data = spec.model_dump(mode="json", include={"model", "parallelism", "placement", "pricing", "workload"})
    serving = spec.serving
    data["serving"] = [serving.maxModelLen, serving.maxConcurrency, serving.gpuMemoryUtilization]
    data["model"].pop("hfTokenSecretRef", None)
    data["model"].pop("servedName", None)
    found = lora.limits(spec)
    if found is not None:  # the adapter slots' memory, not the adapter list: adding one plans nothing
        data["lora"] = [found.max_rank, found.max_loras]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def replan_token(metadata: dict[str, Any]) -> str:
    return str((metadata.get("annotations") or {}).get(REPLAN_ANNOTATION, ""))


def _node_fits(plan: dict[str, Any], node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    labels = node.get("metadata", {}).get("labels", {})
    allocatable = int((node.get("status", {}).get("allocatable") or {}).get("nvidia.com/gpu", "0") or 0)
    return labels.get("nvidia.com/gpu.product") == plan.get("gpuProduct") and allocatable >= int(
        plan.get("gpusPerNode") or 0)


def still_placeable(plan: dict[str, Any], nodes: list[dict[str, Any]]) -> bool:
    """Do nodes of the planned product with enough GPUs for one pod still exist, enough of them?"""
    fitting = sum(1 for node in nodes if _node_fits(plan, node))
    return fitting >= int(plan.get("nodesPerReplica") or 1)


def node_change_matters(plan: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Can this node change move a deployment's plan? (Which deployments a node event reconciles.)

    A deployment without a feasible plan may fit now; one with a plan is re-planned only when its
    nodes are gone (`needs_new_plan`), so only a node that stopped fitting its plan matters. Labels
    the node controller adds, a taint lifted, a heartbeat: none of them reconcile 500 deployments.
    """
    if not plan.get("feasible"):
        return True
    return _node_fits(plan, old) and not _node_fits(plan, new)


def needs_new_plan(current: dict[str, Any] | None, fingerprint: str, token: str,
                   nodes: list[dict[str, Any]]) -> bool:
    if not current or not current.get("feasible"):
        return True
    if current.get("specFingerprint") != fingerprint or current.get("replanToken", "") != token:
        return True
    return not still_placeable(current, nodes)


def pods_of_others(pods: list[dict[str, Any]], namespace: str, name: str) -> list[dict[str, Any]]:
    """GPU pods minus this deployment's own: a re-plan may reuse the GPUs its replicas hold."""
    return [p for p in pods if not (p["metadata"].get("namespace") == namespace
                                    and (p["metadata"].get("labels") or {}).get(INSTANCE_LABEL) == name)]


def context_exceeded(spec_dict: dict[str, Any], arch: ModelArch | None = None) -> str | None:
    """Why serving.maxModelLen cannot work for a catalog model, with the numbers; None when it can.

    vLLM refuses to start with a max_model_len beyond the model's max_position_embeddings, so
    planning (and rolling out pods that crash) would only hide the mistake.
    """
    name = str((spec_dict.get("model") or {}).get("name") or "")
    wanted = int((spec_dict.get("serving") or {}).get("maxModelLen") or 8192)
    arch = arch or (lookup_model(name) if name else None)
    if arch is None or arch.context_length is None or wanted <= arch.context_length:
        return None
    return (f"serving.maxModelLen {wanted} exceeds the context window of {name}: {arch.context_length} tokens "
            f"(max_position_embeddings of {arch.name}); vLLM would refuse to start. Set serving.maxModelLen "
            f"to at most {arch.context_length}")


def make_plan(spec_dict: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
              prices: dict[str, float] | None, *, fingerprint: str, token: str,
              learned: dict[str, planner.plans.Correction] | None = None,
              architecture: ModelArch | None = None,
              architecture_failure: tuple[str, str] | None = None) -> dict[str, Any]:
    """`architecture`: the model's, read from its config.json when the catalog lacks it (or why
    it could not be read: `architecture_failure`, the hub's reason and words)."""
    result: dict[str, Any]
    too_long = context_exceeded(spec_dict, architecture)
    if architecture_failure is not None:
        result = {"feasible": False, "reasonCode": architecture_failure[0],
                  "reason": f"cannot read the model's config.json: {architecture_failure[1]}"}
    elif too_long:
        result = {"feasible": False, "reasonCode": "MaxModelLenExceedsContext", "reason": too_long}
    else:
        try:
            request = planner.request_from_spec(spec_dict, architecture=architecture)
        except planner.PlanInputError as exc:  # e.g. a model the catalog lacks and no architecture given
            result = {"feasible": False, "reasonCode": "InvalidModel", "reason": str(exc)}
        else:
            inventory = planner.inventory_from_nodes(nodes, pods)
            result = planner.plan(request, inventory, prices=prices, learned=learned).to_dict()
            if architecture is not None:  # where the numbers came from, on the status
                result["architecture"] = hfconfig.describe(request.arch)
    result["specFingerprint"] = fingerprint
    result["replanToken"] = token
    return result
