"""Specs and plans for render tests, shaped like the planner's JSON (planner/plans.py to_dict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children
from shardwise_runtime import vllm_flags

HELP = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu" / "serve-help-all.txt"
H100 = "NVIDIA-H100-80GB-HBM3"
GB200 = "NVIDIA-GB200"
OWNER = children.Owner(name="llama", namespace="ml", uid="0b5e-uid")


def help_flags() -> frozenset[str]:
    """The flags of vLLM 0.32's own `serve --help=all`, read from the capture itself."""
    return vllm_flags.parse_help_flags(HELP.read_text())


def spec(**overrides: Any) -> InferenceDeploymentSpec:
    """A 405B spec; `overrides` are top-level spec sections (replacing, not merging)."""
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "dtype": "bfloat16"},
        "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        **overrides,
    }
    return InferenceDeploymentSpec.model_validate(body)


def plan(*, tp: int = 8, pp: int = 1, nodes: int = 1, per_node: int = 8, product: str | None = H100,
         interconnect: str = "nvswitch") -> dict[str, Any]:
    return {
        "feasible": True,
        "tensorParallel": tp,
        "pipelineParallel": pp,
        "gpusPerReplica": tp * pp,
        "nodesPerReplica": nodes,
        "gpusPerNode": per_node,
        "gpuProduct": product,
        "interconnect": interconnect,
        "reason": "test plan",
        "reasonCode": "Planned",
        "predicted": {"ttftMs": 257.0, "itlMs": 40.8, "tokensPerSecond": 178.7},
    }


def multi_node_plan(**overrides: Any) -> dict[str, Any]:
    """TP 8 x PP 2 over two 8-GPU H100 nodes: vLLM's own advice for 405B in bf16."""
    return plan(**{"tp": 8, "pp": 2, "nodes": 2, "per_node": 8, **overrides})


def gb200_plan() -> dict[str, Any]:
    """TP 8 across two 4-GPU GB200 trays of one NVLink clique."""
    return plan(tp=8, pp=1, nodes=2, per_node=4, product=GB200)
