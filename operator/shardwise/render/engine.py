"""Which program a serving pod runs, per spec.engine, and with which image.

vLLM's command lines are render/vllm_args.py (single node) and the launcher's (multi-node,
render/leaderworkerset.py); SGLang's are render/sglang_args.py and TensorRT-LLM's
render/trtllm_args.py. This module only chooses among them, so vLLM's output is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.api import engines
from shardwise.api.engines import Engine
from shardwise.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeploymentSpec
from shardwise.render import sglang_args, trtllm_args
from shardwise.render.vllm_args import build_serve_args

DEFAULT_IMAGES = {Engine.sglang: engines.SGLANG_IMAGE, Engine.trtllm: engines.TRTLLM_IMAGE}

TRTLLM_MULTI_NODE = ("spec.engine trtllm: the plan needs {nodes} nodes per replica, and a TensorRT-LLM replica "
                     "across nodes (MPI ranks under trtllm-llmapi-launch) is not rendered by this version of "
                     "shardwise; give it GPUs whose node holds a whole replica, set parallelism.tensor and "
                     "parallelism.pipeline to fit one node, or use engine vllm or sglang")


def command_and_args(spec: InferenceDeploymentSpec, plan: dict[str, Any], resource_name: str) -> tuple[list[str], list[str]]:
    """The container's command and args on one node (or, for SGLang, on every node of a group)."""
    if spec.engine is Engine.sglang:
        return list(sglang_args.COMMAND), sglang_args.build_args(spec, plan, resource_name)
    if spec.engine is Engine.trtllm:
        return list(trtllm_args.COMMAND), trtllm_args.build_args(spec, plan)
    return ["vllm", "serve"], build_serve_args(spec, plan, resource_name)


def image(spec: InferenceDeploymentSpec, overrides: Mapping[str, str] | None = None) -> str:
    """serving.image when set to anything but the vLLM default; else the engine's image (the
    operator's setting for it when given)."""
    if spec.engine is Engine.vllm or spec.serving.image != DEFAULT_IMAGE:
        return spec.serving.image
    return (overrides or {}).get(spec.engine.value) or DEFAULT_IMAGES[spec.engine]


def plan_problem(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> str | None:
    """Why the engine cannot run this plan in this version (None: it can)."""
    nodes = int(plan.get("nodesPerReplica") or 1)
    if spec.engine is Engine.trtllm and plan.get("feasible") and nodes > 1:
        return TRTLLM_MULTI_NODE.format(nodes=nodes)
    return None


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") == "Deployment":
        return [obj["spec"]["template"]["spec"]]
    if obj.get("kind") == "LeaderWorkerSet":
        template = obj["spec"]["leaderWorkerTemplate"]
        return [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]
    return []


def apply_to_workloads(objects: list[dict[str, Any]], spec: InferenceDeploymentSpec, plan: dict[str, Any],
                       resource_name: str, metadata: dict[str, Any],
                       images: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The engine's image in every serving pod and, for TensorRT-LLM, its options file (a ConfigMap,
    first in apply order so the pods find it). vLLM's objects come back untouched."""
    if spec.engine is Engine.vllm:
        return objects
    for obj in objects:
        for pod in _pod_specs(obj):
            pod["containers"][0]["image"] = image(spec, images)
            if spec.engine is Engine.trtllm:
                trtllm_args.mount_options(pod, resource_name)
    if spec.engine is Engine.trtllm:
        return [trtllm_args.build_options_configmap(metadata, spec, plan), *objects]
    return objects
