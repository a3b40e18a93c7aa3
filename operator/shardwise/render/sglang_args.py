"""The `python -m sglang.launch_server` command line for a plan (spec.engine sglang, SGLang 0.5.23).

Sizes map from the plan as SERVING-SHAPES.md D says SGLang reads them: `--tp-size` is the GPUs of
one pipeline stage, so a plan of DP attention ranks of TP GPUs each is `--tp-size TP*DP
--attn-dp-size DP` (0.5.23's spelling; `--dp-size N --enable-dp-attention` is deprecated, and
`--dp-size` alone would be SGLang's own replicas, which the operator's replicas already are); the
plan's expert parallel size is `--ep-size`. Multi-node: every pod of a LeaderWorkerSet group runs
the same command with its own `--node-rank`; the rank and the leader's address come from the
variables LWS puts in each container, which Kubernetes expands in `args` ($(VAR)).

Every flag is checked against the captured 0.5.23 help by tests/unit/render/test_engine_args.py.
"""

from __future__ import annotations

from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render.vllm_args import VLLM_PORT, served_model_name

COMMAND = ["python3", "-m", "sglang.launch_server"]
# The port rank 0 opens for the group's torch.distributed rendezvous (--dist-init-addr).
DIST_INIT_PORT = 20000
NODE_RANK = "$(LWS_WORKER_INDEX)"
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"

# SGLang's --dtype has no fp8: fp8 of an unquantized checkpoint is --quantization fp8.
_DTYPE_FLAG = {"auto": "auto", "bfloat16": "bfloat16", "float16": "float16", "fp8": "auto"}


def _precision_flags(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> list[str]:
    flags = ["--dtype", _DTYPE_FLAG[spec.model.dtype.value]]
    weights = plan.get("weights")
    method = weights.get("quantization") if isinstance(weights, dict) else None
    return flags + (["--quantization", str(method)] if method else [])


def _parallel_flags(plan: dict[str, Any]) -> list[str]:
    tp, dp = int(plan["tensorParallel"]), int(plan.get("dataParallel") or 1)
    flags = ["--tp-size", str(tp * dp), "--pp-size", str(plan["pipelineParallel"])]
    if dp > 1:
        flags += ["--attn-dp-size", str(dp)]
    ep = int(plan.get("expertParallel") or 1)
    if ep > 1:
        flags += ["--ep-size", str(ep)]
    return flags


def _multi_node_flags(plan: dict[str, Any]) -> list[str]:
    nodes = int(plan.get("nodesPerReplica") or 1)
    if nodes <= 1:
        return []
    return ["--nnodes", str(nodes), "--node-rank", NODE_RANK,
            "--dist-init-addr", f"{LEADER_ADDRESS}:{DIST_INIT_PORT}"]


def build_args(spec: InferenceDeploymentSpec, plan: dict[str, Any], resource_name: str) -> list[str]:
    """Arguments after `python3 -m sglang.launch_server`."""
    args = [
        "--model-path", spec.model.name,
        "--served-model-name", served_model_name(spec, resource_name),
        "--host", "0.0.0.0",
        "--port", str(VLLM_PORT),
        *_parallel_flags(plan),
        "--context-length", str(spec.serving.maxModelLen),
        # SGLang's limit is the whole server's, not per attention-DP rank as vLLM's --max-num-seqs is.
        "--max-running-requests", str(spec.serving.maxConcurrency),
        "--mem-fraction-static", str(spec.serving.gpuMemoryUtilization),
        *_precision_flags(spec, plan),
        *(["--revision", spec.model.revision] if spec.model.revision else []),
        # /metrics (the sglang: families observe/parse.py reads) is served only with this.
        "--enable-metrics",
        *_multi_node_flags(plan),
    ]
    return args + list(spec.serving.sglangExtraArgs)
