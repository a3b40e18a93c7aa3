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

# vLLM's --dtype has no fp8; fp8 weights are a quantization method (dtype stays bf16 compute).
_DTYPE_FLAGS = {"bfloat16": ["--dtype", "bfloat16"], "float16": ["--dtype", "float16"],
                "fp8": ["--dtype", "bfloat16", "--quantization", "fp8"]}


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
        "--max-num-seqs", str(spec.serving.maxConcurrency),
        "--gpu-memory-utilization", str(spec.serving.gpuMemoryUtilization),
        "--port", str(VLLM_PORT),
        *_DTYPE_FLAGS[spec.model.dtype.value],
    ]
    if spec.model.quantization is not None:
        args += ["--quantization", spec.model.quantization.value]
    return args + lora.serve_flags(spec) + list(spec.serving.extraArgs)
