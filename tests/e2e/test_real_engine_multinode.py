"""A two-node replica (PP=2 over two pods) on the REAL vLLM engine, through `shardwise-launch`,
and what happens when its worker rank dies.

The operator plans the tiny model (named as Llama 3.1 8B) as TP1 x PP2 on two one-GPU nodes and
renders a LeaderWorkerSet. No LWS controller runs in the local cluster (see test_multinode.py), so
this test plays its part in the smallest way: it creates the group's two pods from the rendered
leader and worker templates with the labels and LWS_* environment the LWS controller gives them.
From there everything is real: the fleet runs each pod's rendered `shardwise-launch` argv, the
launchers form the group and run vLLM's own multi-node mode, the leader serves the OpenAI API.

Then the worker's vLLM is killed (SIGKILL, as an OOM kill would). vLLM's leader alone would
answer /health 200 for minutes; with the launcher watching its peers the leader must turn NotReady
within 60 s. The containers restart as a kubelet restarts them (the fleet plays the kubelet), the
launchers form the group again, and the leader serves again. LeaderWorkerSet's own
RecreateGroupOnPodRestart (deleting and recreating the pods) is not exercised here: no LWS
controller runs locally.
"""

from __future__ import annotations

import copy
import os
import pathlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

from shardwise.devcluster.cluster import LocalCluster
from shardwise.render import leaderworkerset
from tests.e2e import real_engine_support as rs
from tests.e2e.real_engine_support import real_fleet  # noqa: F401 - a fixture
from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(2400)]

NAME = "tiny-pp"
SERVED = "tiny"
NODES = ROOT / "tests/fixtures/clusters/real-engine-l4.yaml"
MANIFEST = f"""
apiVersion: shardwise.io/v1alpha1
kind: InferenceDeployment
metadata: {{name: {NAME}}}
spec:
  model: {{name: meta-llama/Llama-3.1-8B-Instruct, servedName: {SERVED}}}
  serving: {{maxModelLen: 1024, maxConcurrency: 4, image: "{LOCAL_VLLM_CPU_IMAGE}"}}
  parallelism: {{tensor: 1, pipeline: 2}}
  placement:
    gpuProducts: [NVIDIA-L4]
    tolerations: [{{key: shardwise.io/dedicated, operator: Equal, value: real-engine, effect: NoSchedule}}]
"""
NOT_READY_WITHIN_S = 60


@pytest.fixture(scope="module")
def l4_nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    names = cluster.add_nodes(NODES)
    try:
        yield names
    finally:
        cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def _group_pods(lws: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The pods LWS v0.7 creates for group 0: names, labels and LWS_* environment as it sets them."""
    name = lws["metadata"]["name"]
    template = lws["spec"]["leaderWorkerTemplate"]
    size = template["size"]
    leader_name = f"{name}-0"
    pods = []
    for index, (pod_name, key) in enumerate([(leader_name, "leaderTemplate")] +
                                            [(f"{name}-0-{i}", "workerTemplate") for i in range(1, size)]):
        body = copy.deepcopy(template[key])
        labels = {**body["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/name": name,
                  "leaderworkerset.sigs.k8s.io/group-index": "0",
                  "leaderworkerset.sigs.k8s.io/worker-index": str(index),
                  "leaderworkerset.sigs.k8s.io/group-key": "test-group-0"}
        env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{leader_name}.{name}.{namespace}"},
               {"name": "LWS_GROUP_SIZE", "value": str(size)},
               {"name": "LWS_WORKER_INDEX", "value": str(index)}]
        for container in body["spec"]["containers"]:
            container["env"] = [*container.get("env", []), *env]
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod_name, "labels": labels,
                                  "annotations": body["metadata"].get("annotations", {})},
                     "spec": body["spec"]})
    return pods


def _pod(kubectl: Kubectl, name: str) -> dict[str, Any]:
    return kubectl.get("pod", name) or {}


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


def _restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def _vllm_pids_with(pod_ip: str, needle: str) -> list[int]:
    """vLLM processes (not the launcher) running for the pod with this IP."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"POD_IP={pod_ip}".encode() in environ and b"serve" in argv and needle.encode() in argv:
            found.append(int(proc.name))
    return found


def _answer(ip: str) -> str:
    client = rs.ClosedLoopClient(f"http://{ip}:8000/v1", SERVED)
    try:
        result = client.one(8)
    finally:
        client.client.close()
    assert result.error is None, result.error
    assert result.completion_tokens == 8
    return "ok"


def test_pp2_over_two_pods_serves_and_a_dead_worker_turns_the_leader_not_ready(
        operator: OperatorProcess, kubectl: Kubectl, l4_nodes: list[str], real_fleet: Any) -> None:
    kubectl.apply_yaml(MANIFEST)
    lws = eventually(lambda: kubectl.get("leaderworkerset", leaderworkerset.workload_name(NAME)),
                     timeout=60, what="the rendered LeaderWorkerSet")
    plan = kubectl.get("infd", NAME)["status"]["plan"]
    assert (plan["tensorParallel"], plan["pipelineParallel"], plan["nodesPerReplica"]) == (1, 2, 2)
    pods = _group_pods(lws, kubectl.namespace)
    kubectl.apply_yaml(yaml.safe_dump_all(pods))
    leader_name, worker_name = pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]

    leader = eventually(lambda: (p := _pod(kubectl, leader_name)) and _ready(p) and p, timeout=1200,
                        interval=2, what=f"leader {leader_name} Ready (vLLM /health through the group)")
    worker = _pod(kubectl, worker_name)
    assert _ready(worker) and leader["spec"]["nodeName"] != worker["spec"]["nodeName"]
    leader_ip, worker_ip = leader["status"]["podIP"], worker["status"]["podIP"]
    assert _answer(leader_ip) == "ok"
    restarts_before = _restarts(leader)

    # Kill the worker rank's vLLM outright.
    victims = _vllm_pids_with(worker_ip, "--headless")
    assert victims, "no vLLM process found for the worker pod"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    eventually(lambda: not _ready(_pod(kubectl, leader_name)), timeout=NOT_READY_WITHIN_S, interval=1,
               what=f"leader NotReady within {NOT_READY_WITHIN_S}s of the worker's death")
    took = time.monotonic() - killed_at
    print(f"\nleader NotReady {took:.1f}s after the worker's vLLM was killed")

    # Both containers restart and the launchers form the group again; the leader serves again.
    eventually(lambda: (p := _pod(kubectl, leader_name)) and _ready(p) and _restarts(p) > restarts_before,
               timeout=1200, interval=2, what="the group formed again and the leader Ready")
    assert _answer(leader_ip) == "ok"
