"""Simulated GPU nodes from a topology file (tests/fixtures/clusters/*.yaml).

A topology file lists node groups; each becomes `count` Node objects carrying what a real GPU node
carries: allocatable `nvidia.com/gpu`, GPU Feature Discovery labels and shardwise's NVLink labels,
plus the annotation kwok uses to pick the nodes it plays the kubelet for.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def load_groups(path: pathlib.Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text())["nodeGroups"])


def node_objects(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    nodes = []
    for group in groups:
        for index in range(int(group.get("count", 1))):
            nodes.append(_node(f"{group['namePrefix']}{index}", group))
    return nodes


def _node(name: str, group: dict[str, Any]) -> dict[str, Any]:
    gpu = group["gpu"]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gpu["product"],
        "nvidia.com/gpu.count": str(gpu["count"]),
        "nvidia.com/gpu.memory": str(gpu["memoryMiB"]),
        "nvidia.com/gpu.family": gpu.get("family", ""),
        **{k: str(v) for k, v in (group.get("labels") or {}).items()},
    }
    topo = group.get("topology")
    if topo:  # absent = a node the labeler has not visited yet: unknown topology
        labels["shardwise.io/gpu-interconnect"] = topo["interconnect"]
        labels["shardwise.io/nvlink-domain-size"] = str(topo["nvlinkDomainSize"])
        if topo.get("nvlinkBandwidthGBps"):
            labels["shardwise.io/nvlink-bandwidth-gbps"] = str(topo["nvlinkBandwidthGBps"])
    if gpu.get("clique"):
        labels["nvidia.com/gpu.clique"] = gpu["clique"]
    resources = {
        "cpu": str(group.get("cpu", "96")),
        "memory": str(group.get("memory", "1Ti")),
        "pods": "110",
        "nvidia.com/gpu": str(gpu["count"]),
    }
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {},
        "status": {"capacity": resources, "allocatable": resources,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"}},
    }
    if group.get("taints"):
        node["spec"]["taints"] = group["taints"]
    return node
