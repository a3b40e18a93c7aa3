"""A tiny mixture of experts on the REAL vLLM 0.32 engine (CPU build) with the operator's rendered
expert-parallel argv: what vLLM's CPU engine does with EP and DP.

The pods are rendered by the operator's own renderer (shardwise.render.children) from EP plans as
the planner writes them (TP2xEP2: `--tensor-parallel-size 2 --enable-expert-parallel`;
DP2xTP1xEP2: `--data-parallel-size 2 --data-parallel-size-local 2 --enable-expert-parallel`), and
created in the cluster; the local fleet runs each one's rendered argv with the tiny Qwen3-MoE
(hack/make-tiny-moe.py: 8 experts, 2 per token) in place of the hub model, as it does for EP/DP
argv. The plans are given here, not asked of the planner: on the 2 GPUs that two CPU cores can
stand in for, the planner never prefers an EP layout for a catalogued MoE (it picks TP2, TP1 or
DP2xTP1 by its figures), and spec.model.architecture has no field for experts.

What vLLM 0.32's CPU engine does (recorded here, so that a vLLM that fixes it fails this test and
the docs get updated; docs/real-engine.md "Mixture of experts"):
- TP2 x EP2 starts (each rank logs "[EP Rank r/2] Expert parallelism is enabled ... Local/global
  number of experts: 4/8"), turns Ready, lists the model, and its first forward pass through an MoE
  layer kills a worker: "Segfault encountered" in csrc/cpu/cpu_fused_moe.cpp (fused_moe_impl), the
  API answers 500 "EngineCore encountered an issue. See stack trace (above) for the root cause.".
  The CPU experts kernel (CPUUnquantizedExperts.apply) is handed no expert map: the router's global
  expert ids index a rank's 4 local experts. The same model at TP1 (no EP) answers.
- DP2 (with or without EP) never starts: the warm-up's MoE dispatch goes through the CPU
  communicator's all-to-all, whose all_gatherv is the base class's `raise NotImplementedError`.
So the tiny MoE cannot answer, through the gateway or at all, with an EP argv on this engine. With
vLLM's internal DP load balancing one API server fronts all of a pod's DP engines, so the gateway
sees one endpoint per pod, as for any other layout (docs/real-engine.md says why).
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.devcluster.cluster import LocalCluster
from shardwise.render import children
from tests.e2e import real_engine_support as rs
from tests.e2e.real_engine_support import real_fleet  # noqa: F401 - a fixture
from tests.e2e.support import Kubectl, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(2400)]

SERVED = "tiny"
START_S = 1200  # vLLM with two ranks on two busy cores: minutes


def _spec() -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "Qwen/Qwen3-30B-A3B", "servedName": SERVED},
        "serving": {"maxModelLen": 1024, "maxConcurrency": 8, "image": LOCAL_VLLM_CPU_IMAGE},
        "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}})


def _plan(tp: int, dp: int) -> dict[str, Any]:
    """An EP plan as the planner writes it (status.plan fields the renderer reads)."""
    gpus = tp * dp
    return {"feasible": True, "tensorParallel": tp, "pipelineParallel": 1, "dataParallel": dp,
            "expertParallel": gpus, "layout": f"DP{dp}xTP{tp}xEP{gpus}" if dp > 1 else f"TP{tp}xEP{gpus}",
            "gpusPerReplica": gpus, "nodesPerReplica": 1, "gpusPerNode": gpus,
            "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch",
            "memory": {"weightsGiBPerGPU": 28.4, "weightsGiB": 56.8}}


def _pod_from_plan(name: str, plan: dict[str, Any], namespace: str) -> dict[str, Any]:
    owner = children.Owner(name=name, namespace=namespace, uid=str(uuid.uuid4()))
    template = children.render(owner, _spec(), plan, 1)[0]["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": template["metadata"]["labels"],
                         "annotations": template["metadata"].get("annotations", {})},
            "spec": template["spec"]}


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


def _engine_log(cluster: LocalCluster, namespace: str, pod: str) -> str:
    folder = cluster.log_dir / f"real-{namespace}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob(f"*{pod}*.log")))


def _running_argv(pod_ip: str) -> list[str]:
    """The argv of the `vllm serve` process the fleet started for the pod with this IP."""
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"POD_IP={pod_ip}".encode() in environ and "serve" in argv:
            return argv
    return []


@pytest.fixture
def created(kubectl: Kubectl) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:  # a DP pod restarts forever; stop it before the fleet goes
        kubectl.run("delete", "pod", name, "--wait=false", check=False)


def test_tp2_ep2_starts_and_its_first_moe_step_segfaults_in_vllm_cpu_kernel(
        cluster: LocalCluster, kubectl: Kubectl, real_fleet: Any, created: list[str]) -> None:
    name = "tiny-moe-tep"
    pod = _pod_from_plan(name, _plan(tp=2, dp=1), kubectl.namespace)
    args = pod["spec"]["containers"][0]["args"]
    assert "--enable-expert-parallel" in args and args[args.index("--tensor-parallel-size") + 1] == "2"
    kubectl.apply_yaml(yaml.safe_dump(pod))
    created.append(name)

    live = eventually(lambda: (p := kubectl.get("pod", name)) and _ready(p) and p, timeout=START_S, interval=2,
                      what=f"{name} Ready (vLLM /health)")
    ip = live["status"]["podIP"]
    argv = _running_argv(ip)
    assert "--enable-expert-parallel" in argv and any(a.endswith("/tiny-moe-v1") for a in argv), argv
    log = _engine_log(cluster, kubectl.namespace, name)
    assert "Expert parallelism is enabled" in log and "Local/global number of experts: 4/8" in log
    models = httpx.get(f"http://{ip}:8000/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == [SERVED]

    reply = httpx.post(f"http://{ip}:8000/v1/chat/completions", timeout=300, json={
        "model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    print(f"\nTP2xEP2 on vLLM 0.32 CPU: HTTP {reply.status_code} {reply.text[:200]}")
    # vLLM's own words, recorded (module docstring): a vLLM that serves EP on CPU fails here.
    assert reply.status_code == 500, reply.text
    assert "EngineCore encountered an issue" in reply.text
    log = eventually(lambda: (t := _engine_log(cluster, kubectl.namespace, name)) and "Segfault encountered" in t
                     and t, timeout=60, what="the worker's segfault in the engine log")
    assert "cpu_fused_moe.cpp" in log


def test_dp2_ep2_is_refused_at_startup_by_the_cpu_communicator(
        cluster: LocalCluster, kubectl: Kubectl, real_fleet: Any, created: list[str]) -> None:
    name = "tiny-moe-dep"
    pod = _pod_from_plan(name, _plan(tp=1, dp=2), kubectl.namespace)
    args = pod["spec"]["containers"][0]["args"]
    assert "--enable-expert-parallel" in args and args[args.index("--data-parallel-size") + 1] == "2"
    kubectl.apply_yaml(yaml.safe_dump(pod))
    created.append(name)

    log = eventually(lambda: (t := _engine_log(cluster, kubectl.namespace, name)) and "all_gatherv" in t
                     and "NotImplementedError" in t and t, timeout=START_S, interval=2,
                     what="vLLM's DP startup failure in the engine log")
    assert "cpu_communicator.py" in log and "dispatch" in log
    assert not _ready(kubectl.get("pod", name))
