"""The `trtllm-serve` command line and its LLM API options file for a plan (spec.engine trtllm).

Sizes map as trtllm-serve reads them (SERVING-SHAPES.md E): `--tp_size` is every GPU of a pipeline
stage, so a plan of DP attention ranks of TP GPUs each is `--tp_size TP*DP` with
`enable_attention_dp: true` in the options file; `--ep_size` is the plan's expert parallel size.
`--max_batch_size` is the replica's maxConcurrency; `--max_num_tokens`, the tokens one iteration
may schedule, is the context length, so one whole prompt always fits a step.
`--kv_cache_free_gpu_memory_fraction` takes serving.gpuMemoryUtilization, though TensorRT-LLM reads
it as the fraction of memory left after the weights, not of the whole GPU (docs/engines.md).

The options file (a ConfigMap mounted read-only) turns on what the status reads:
`return_perf_metrics` mounts the Prometheus endpoint, `enable_iter_perf_stats` the JSON /metrics.
Every flag and key is checked against trtllm_flags.json by tests/unit/render/test_engine_args.py.
Multi-node (MPI ranks under trtllm-llmapi-launch) is not rendered: see engines.multi_node_problem.
"""

from __future__ import annotations

from typing import Any

import yaml

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render.vllm_args import VLLM_PORT

COMMAND = ["trtllm-serve"]
OPTIONS_DIR = "/etc/shardwise/trtllm"
OPTIONS_FILE = "llm-api-options.yaml"
OPTIONS_VOLUME = "trtllm-options"


def options_configmap_name(resource_name: str) -> str:
    return f"{resource_name}-trtllm-options"


def build_options(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> dict[str, Any]:
    """The LLM API options (LlmArgs keys) the command line cannot say."""
    options: dict[str, Any] = {
        "kv_cache_config": {"free_gpu_memory_fraction": spec.serving.gpuMemoryUtilization,
                            "enable_block_reuse": True},
        "enable_iter_perf_stats": True,
        "return_perf_metrics": True,
    }
    if int(plan.get("dataParallel") or 1) > 1:
        options["enable_attention_dp"] = True
    return options


def build_args(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> list[str]:
    """Arguments after `trtllm-serve`: the model first, then flags."""
    tp, dp = int(plan["tensorParallel"]), int(plan.get("dataParallel") or 1)
    ep = int(plan.get("expertParallel") or 1)
    args = [
        spec.model.name,
        "--host", "0.0.0.0",
        "--port", str(VLLM_PORT),
        "--tp_size", str(tp * dp),
        "--pp_size", str(plan["pipelineParallel"]),
        *(["--ep_size", str(ep)] if ep > 1 else []),
        "--max_batch_size", str(spec.serving.maxConcurrency),
        "--max_num_tokens", str(spec.serving.maxModelLen),
        "--max_seq_len", str(spec.serving.maxModelLen),
        "--kv_cache_free_gpu_memory_fraction", str(spec.serving.gpuMemoryUtilization),
        *(["--revision", spec.model.revision] if spec.model.revision else []),
        "--extra_llm_api_options", f"{OPTIONS_DIR}/{OPTIONS_FILE}",
    ]
    return args + list(spec.serving.trtllmExtraArgs)


def build_options_configmap(metadata: dict[str, Any], spec: InferenceDeploymentSpec,
                            plan: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {OPTIONS_FILE: yaml.safe_dump(build_options(spec, plan), sort_keys=True)}}


def mount_options(pod: dict[str, Any], resource_name: str) -> None:
    pod["volumes"].append({"name": OPTIONS_VOLUME, "configMap": {"name": options_configmap_name(resource_name)}})
    pod["containers"][0]["volumeMounts"].append({"name": OPTIONS_VOLUME, "mountPath": OPTIONS_DIR, "readOnly": True})
