"""Nodes and GPU-holding pods, kept current by watch events instead of listed on every reconcile.

Planning needs every GPU node and every pod that holds GPUs. Listing them for each reconcile costs
O(deployments x nodes) per resync, megabytes per list on a large cluster; a watch keeps one slim
copy (only the fields the planner reads) and every reconcile reads it. Until the first watch
events have arrived the cache says it is cold and the caller lists instead.
"""

from __future__ import annotations

import threading
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"allocatable": dict(status.get("allocatable") or {}),
                   "capacity": dict(status.get("capacity") or {}),
                   "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]},
    }


def _holds_gpus(container: dict[str, Any]) -> bool:
    resources = container.get("resources") or {}
    return any(str((resources.get(kind) or {}).get(GPU_RESOURCE, "0")) not in ("0", "")
               for kind in ("limits", "requests"))


def slim_pod(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The fields free-GPU accounting reads, or None for pods that hold no GPU (not worth keeping)."""
    phase = (pod.get("status") or {}).get("phase")
    spec = pod.get("spec") or {}
    kinds = ("containers", "initContainers")
    if phase in ("Succeeded", "Failed") or not any(_holds_gpus(c) for k in kinds for c in spec.get(k) or []):
        return None
    # The planner counts a pod's GPUs (containers and init containers) from these resources.
    return {
        "metadata": {"name": pod["metadata"].get("name"), "namespace": pod["metadata"].get("namespace"),
                     "labels": dict(pod["metadata"].get("labels") or {})},
        "spec": {"nodeName": spec.get("nodeName"),
                 **{k: [{"resources": c.get("resources") or {}} for c in spec.get(k) or []] for k in kinds}},
        "status": {"phase": phase},
    }


class ClusterCache:
    """Thread-safe slim copies of nodes and GPU pods, fed by watch events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes_seen = False
        self.pods_seen = False

    def on_node(self, event_type: str | None, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            self.nodes_seen = True
            if event_type == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = slim_node(node)

    def on_pod(self, event_type: str | None, pod: dict[str, Any]) -> None:
        key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        slim = None if event_type == "DELETED" else slim_pod(pod)
        with self._lock:
            self.pods_seen = True
            if slim is None:
                self._pods.pop(key, None)
            else:
                self._pods[key] = slim

    def nodes(self) -> list[dict[str, Any]] | None:
        """Every node, or None while the watch has not delivered any yet."""
        with self._lock:
            return list(self._nodes.values()) if self.nodes_seen else None

    def gpu_pods(self) -> list[dict[str, Any]] | None:
        with self._lock:
            return list(self._pods.values()) if self.pods_seen else None
