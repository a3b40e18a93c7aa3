"""The `vllm serve` command line for a plan.

Only flags that exist in vLLM 0.32's `serve --help=all` are emitted (a unit test checks every one
against the captured help text). User extraArgs go last, as separate list items: no shell ever
re-splits them, so quoting cannot break a command line.
"""

from __future__ import annotations

from typing import Any

from shardwise.api import lora
from shardwise.api.v1alpha1 import InferenceDeploymentSpec

VLLM_PORT = 8000

# vLLM's --dtype is the activation width and has no fp8: fp8 weights are a quantization method
# (with `auto` activations). A pre-quantized checkpoint's quantization_config is read by vLLM
# itself, so `--quantization` is rendered only where it changes what is loaded: fp8 asked of an
# unquantized checkpoint (the plan's `weights.quantization`).
_DTYPE_FLAG = {"auto": "auto", "bfloat16": "bfloat16", "float16": "float16", "fp8": "auto"}


def _precision_flags(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> list[str]:
    flags = ["--dtype", _DTYPE_FLAG[spec.model.dtype.value]]
    weights = plan.get("weights")
    if isinstance(weights, dict):
        method = weights.get("quantization")
    else:  # a plan written before it said what is loaded: what the spec asks, as it was rendered
        method = spec.model.quantization.value if spec.model.quantization is not None else (
            "fp8" if spec.model.dtype.value == "fp8" else None)
        if spec.model.dtype.value == "fp8":
            flags = ["--dtype", "bfloat16"]
    return flags + (["--quantization", str(method)] if method else [])


def _parallel_flags(plan: dict[str, Any]) -> list[str]:
    """DP attention and EP (SERVING-SHAPES.md A): `--data-parallel-size` engines of TP GPUs each,
    `--data-parallel-size-local` of them in each pod; `--enable-expert-parallel` shards the experts
    over TP x DP ranks. A plan written before it named them renders as it did (no flags). The
    multi-node DP address, RPC port and start rank are the launcher's (it knows the leader)."""
    dp = int(plan.get("dataParallel") or 1)
    flags: list[str] = []
    if dp > 1:
        nodes = int(plan.get("nodesPerReplica") or 1)
        flags += ["--data-parallel-size", str(dp), "--data-parallel-size-local", str(dp // nodes)]
    if int(plan.get("expertParallel") or 1) > 1:
        flags.append("--enable-expert-parallel")
    return flags


def max_num_seqs(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> int:
    """vLLM applies --max-num-seqs per DP engine: the replica's maxConcurrency over its DP ranks."""
    dp = int(plan.get("dataParallel") or 1)
    return -(-spec.serving.maxConcurrency // dp)


def served_model_name(spec: InferenceDeploymentSpec, resource_name: str) -> str:
    return spec.model.servedName or resource_name


def build_serve_args(spec: InferenceDeploymentSpec, plan: dict[str, Any], resource_name: str) -> list[str]:
    """Arguments after `vllm serve`: the model first, then flags."""
    args = [
        spec.model.name,
        "--served-model-name", served_model_name(spec, resource_name),
        "--tensor-parallel-size", str(plan["tensorParallel"]),
        "--pipeline-parallel-size", str(plan["pipelineParallel"]),
        "--max-model-len", str(spec.serving.maxModelLen),
        "--max-num-seqs", str(max_num_seqs(spec, plan)),
        "--gpu-memory-utilization", str(spec.serving.gpuMemoryUtilization),
        "--port", str(VLLM_PORT),
        *_precision_flags(spec, plan),
        *_parallel_flags(plan),
    ]
    return args + lora.serve_flags(spec) + list(spec.serving.extraArgs)
