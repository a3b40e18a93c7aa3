"""The local fleet serves an EP/DP plan's pod with the tiny mixture of experts, one CPU rank per
engine rank (DP engines counted), the rendered EP/DP flags untouched."""

from __future__ import annotations

import pathlib
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children
from shardwise_runtime.sim import real

INSTALL = real.Install(home=pathlib.Path("/cache/vllm"), launcher="/repo/.venv/bin/shardwise-launch")
OWNER = children.Owner(name="tiny-moe", namespace="ns", uid="u-1")
BASE_ENV = {"PATH": "/usr/bin", "HOME": "/root"}


def _spec() -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "Qwen/Qwen3-30B-A3B", "servedName": "tiny"},
        "serving": {"maxModelLen": 1024, "maxConcurrency": 8, "image": real.LOCAL_VLLM_CPU_IMAGE}})


def _plan(tp: int, dp: int, ep: int) -> dict[str, Any]:
    gpus = tp * dp
    return {"feasible": True, "tensorParallel": tp, "pipelineParallel": 1, "dataParallel": dp,
            "expertParallel": ep, "gpusPerReplica": gpus, "nodesPerReplica": 1, "gpusPerNode": gpus,
            "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvlink",
            "memory": {"weightsGiBPerGPU": 28.4}}


def _launch(plan: dict[str, Any]) -> real.RealLaunch:
    template = children.render(OWNER, _spec(), plan, 1)[0]["spec"]["template"]
    pod = {"metadata": {"name": "tiny-moe-abc", "namespace": "ns", "uid": "uid-1",
                        "labels": template["metadata"]["labels"]},
           "spec": template["spec"], "status": {"phase": "Running", "podIP": "127.9.0.7"}}
    launch = real.real_launch(pod, INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None
    return launch


def test_an_expert_parallel_pod_runs_the_tiny_moe_with_the_rendered_ep_flags() -> None:
    launch = _launch(_plan(tp=2, dp=1, ep=2))
    assert launch.argv[2] == INSTALL.moe_model
    assert "--enable-expert-parallel" in launch.argv and "--data-parallel-size" not in launch.argv
    assert dict(launch.env)["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"  # TP2: two ranks
    assert any("mixture of experts" in change and "Qwen/Qwen3-30B-A3B" in change for change in launch.changes)


def test_dp_engines_each_get_their_own_cpu_ranks() -> None:
    launch = _launch(_plan(tp=1, dp=2, ep=2))
    argv = list(launch.argv)
    assert argv[2] == INSTALL.moe_model
    assert argv[argv.index("--data-parallel-size") + 1] == "2"
    assert argv[argv.index("--data-parallel-size-local") + 1] == "2"
    assert dict(launch.env)["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"  # DP2 x TP1: two ranks


def test_a_dense_plan_keeps_the_tiny_llama() -> None:
    launch = _launch(_plan(tp=2, dp=1, ep=1))
    assert launch.argv[2] == INSTALL.model and "--enable-expert-parallel" not in launch.argv


def test_world_size_counts_dp_engines_per_pod() -> None:
    assert real.world_size_per_pod(["m", "-tp", "2", "--data-parallel-size", "4",
                                    "--data-parallel-size-local", "2"], nodes=2) == 4
    assert real.world_size_per_pod(["m", "-tp", "2", "--data-parallel-size", "4"], nodes=2) == 4
    assert real.world_size_per_pod(["m", "-tp", "2", "-pp", "2"], nodes=2) == 2
