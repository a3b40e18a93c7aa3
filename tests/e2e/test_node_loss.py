"""Node loss: the serving node disappears, shardwise says so with numbers, and recovers when GPUs return."""

from __future__ import annotations

import pytest
import yaml

from shardwise.devcluster import topology
from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import Kubectl, OperatorProcess, eventually

pytestmark = pytest.mark.e2e

SPARE = {"namePrefix": "h200-spare-", "count": 1,
         "gpu": {"product": "NVIDIA-H200", "count": 8, "memoryMiB": 143771, "family": "hopper"},
         "topology": {"interconnect": "nvswitch", "nvlinkDomainSize": 8, "nvlinkBandwidthGBps": 900}}

DEPLOYMENT = {
    "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": "on-h200"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "parallelism": {"objective": "Cost"},
             "placement": {"gpuProducts": ["NVIDIA-H200"]}},
}


def add_spare_node(cluster: LocalCluster) -> str:
    node = topology.node_objects([SPARE])[0]
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(node))
    return node["metadata"]["name"]


def phase_and_planned(kubectl: Kubectl) -> tuple[str | None, str | None]:
    status = (kubectl.get("infd", "on-h200") or {}).get("status") or {}
    planned = kubectl.condition("on-h200", "Planned") or {}
    return status.get("phase"), planned.get("status")


def test_losing_the_only_node_of_a_product_is_reported_and_recovered(operator: OperatorProcess,
                                                                     kubectl: Kubectl, cluster: LocalCluster) -> None:
    node = add_spare_node(cluster)
    try:
        kubectl.apply_yaml(yaml.safe_dump(DEPLOYMENT))
        eventually(lambda: phase_and_planned(kubectl) == ("Ready", "True"), timeout=90, what="Ready on the H200 node")
        pods = kubectl.get("pods", selector="shardwise.io/inference-deployment=on-h200")["items"]
        assert {p["spec"]["nodeName"] for p in pods} == {node}

        cluster.kubectl("delete", "node", node, "--wait=true")
        planned = eventually(lambda: (c := kubectl.condition("on-h200", "Planned")) and c["status"] == "False" and c,
                             timeout=90, what="Planned=False after the node is gone")
        assert planned["reason"] == "NoMatchingNodes", planned
        assert "NVIDIA-H200" in planned["message"], planned["message"]
        assert kubectl.get("deployment", "on-h200") is not None, "shardwise must not delete the workload"
        assert operator.process.alive()

        add_spare_node(cluster)
        eventually(lambda: phase_and_planned(kubectl) == ("Ready", "True"), timeout=120,
                   what="Ready again once an H200 node is back")
    finally:
        cluster.kubectl("delete", "node", node, "--ignore-not-found", check=False)
