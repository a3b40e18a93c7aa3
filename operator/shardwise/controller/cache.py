"""The operator's informers and the reads it makes from them (controller-runtime's cache).

| store                  | watch                                                        | kept          |
| ---------------------- | ------------------------------------------------------------ | ------------- |
| InferenceDeployments   | per watched namespace (or cluster-wide)                      | whole object  |
| Deployments, Services, | per watched namespace, server-side label selector: only      | whole object  |
| LeaderWorkerSets,      | objects carrying the instance label (our children); the last |               |
| InferencePools,        | three are optional (CRD absent: empty, relisted each minute) |               |
| HTTPRoutes, ConfigMaps |                                                              |               |
| Nodes                  | cluster-wide                                                 | GPU nodes, slim; others as a name |
| Pods                   | cluster-wide, non-terminal (field selector)                  | ours and GPU pods, slim |
| PersistentVolumeClaims | per watched namespace, model-cache label (our weight caches) | whole object  |
| ConfigMaps, by name    | the operator's own (pricing, learned corrections): one each  | whole object  |

Pods have no server-side selector for "requests GPUs", and free GPUs depend on every pod on a
GPU node, so the pod watch is cluster-wide; each page and event is slimmed or dropped on
arrival, so memory follows the GPU pods, not the cluster. managedFields are never kept.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from typing import Any

from shardwise.api import v1alpha1 as api
from shardwise.kube.informer import Informer, Obj, strip_managed_fields
from shardwise.kube.client import Kube
from shardwise.render import modelcache as mc
from shardwise.render import routing
from shardwise.render.labels import INSTANCE_LABEL
from shardwise.rollout import pods as rollout_pods

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
INFD = (f"{api.GROUP}/{api.VERSION}", api.KIND)
CHILD_KINDS = {
    ("apps/v1", "Deployment"): "/apis/apps/v1",
    ("v1", "Service"): "/api/v1",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "/apis/leaderworkerset.x-k8s.io/v1",
    (routing.POOL_API_VERSION, routing.POOL_KIND): f"/apis/{routing.POOL_API_VERSION}",
    (routing.ROUTE_API_VERSION, routing.ROUTE_KIND): f"/apis/{routing.ROUTE_API_VERSION}",
    ("v1", routing.BBR_CONFIGMAP_KIND): "/api/v1",
}
_PLURALS = {"Deployment": "deployments", "Service": "services", "LeaderWorkerSet": "leaderworkersets",
            routing.POOL_KIND: routing.POOL_PLURAL, routing.ROUTE_KIND: routing.ROUTE_PLURAL,
            routing.BBR_CONFIGMAP_KIND: "configmaps"}
# Add-ons whose CRDs may be absent: an empty, synced store then, and a relist a minute later.
_OPTIONAL_KINDS = {"LeaderWorkerSet", routing.POOL_KIND, routing.ROUTE_KIND}


# -- slim forms (pure) -----------------------------------------------------------------------

def _meta(obj: Obj, *extra: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    out = {k: meta[k] for k in ("name", "namespace", "resourceVersion", *extra) if k in meta}
    out["labels"] = dict(meta.get("labels") or {})
    return out


def _gpu_count(value: Any) -> int:
    try:
        return int(str(value or "0"))
    except ValueError:
        return 0


def is_gpu_node(node: Obj) -> bool:
    status = node.get("status") or {}
    return (GPU_PRODUCT_LABEL in ((node.get("metadata") or {}).get("labels") or {})
            or _gpu_count((status.get("allocatable") or {}).get(GPU_RESOURCE)) > 0
            or _gpu_count((status.get("capacity") or {}).get(GPU_RESOURCE)) > 0)


def slim_node(node: Obj) -> Obj:
    """What the planner reads of a GPU node; a node without GPUs keeps only its name (the planner
    counts them for its "no GPU nodes" message). Ready's timestamps are dropped: heartbeats must
    not look like changes."""
    if not is_gpu_node(node):
        meta = node.get("metadata") or {}
        return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}}
    spec, status = node.get("spec") or {}, node.get("status") or {}
    return {
        "metadata": _meta(node),
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"allocatable": dict(status.get("allocatable") or {}),
                   "capacity": dict(status.get("capacity") or {}),
                   "conditions": [{k: c.get(k) for k in ("type", "status", "reason")}
                                  for c in status.get("conditions") or [] if c.get("type") == "Ready"]},
    }


def node_material(node: Obj | None) -> Any:
    """A node's planning-relevant content, to tell a real change from a resourceVersion bump."""
    if node is None:
        return None
    return {k: v for k, v in node.items() if k != "metadata"}, (node.get("metadata") or {}).get("labels")


def _holds_gpus(container: dict[str, Any]) -> bool:
    resources = container.get("resources") or {}
    return any(_gpu_count((resources.get(kind) or {}).get(GPU_RESOURCE)) > 0 for kind in ("limits", "requests"))


def _pod_holds_gpus(pod: Obj) -> bool:
    spec = pod.get("spec") or {}
    return any(_holds_gpus(c) for k in ("containers", "initContainers") for c in spec.get(k) or [])


def slim_pod(pod: Obj) -> Obj | None:
    """A pod that holds GPUs or belongs to an InferenceDeployment, slim; None for every other pod.

    GPU accounting reads nodeName, phase and the containers' resources; our own pods also keep
    what status and failure reporting read (conditions, container states, podIP) and what tells
    their template's version (annotations; image, command, args and env of each container).
    """
    meta = pod.get("metadata") or {}
    ours = INSTANCE_LABEL in (meta.get("labels") or {})
    if not ours and not _pod_holds_gpus(pod):
        return None
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    kinds = ("containers", "initContainers")
    slim: Obj = {
        "metadata": _meta(pod, "uid", "deletionTimestamp", "ownerReferences", "creationTimestamp"),
        "spec": {"nodeName": spec.get("nodeName"),
                 **{k: [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec.get(k) or []]
                    for k in kinds}},
        "status": {"phase": status.get("phase")},
    }
    if ours:
        slim["status"].update({k: status[k] for k in (
            "conditions", "podIP", "containerStatuses", "initContainerStatuses", "reason", "message") if k in status})
        # Which version of the template made it (rollout progress): annotations, container versions.
        slim["metadata"]["annotations"] = dict(meta.get("annotations") or {})
        for k in kinds:
            for kept, full in zip(slim["spec"][k], spec.get(k) or []):
                kept.update({f: full[f] for f in rollout_pods.VERSIONED_FIELDS if f in full})
    return slim


def holds_gpus_now(pod: Obj) -> bool:
    """Does this (slim) pod count against its node's free GPUs?"""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and _pod_holds_gpus(pod)


def pod_owner(pod: Obj) -> tuple[str, str] | None:
    meta = pod.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
    return (meta.get("namespace") or "", owner) if owner else None


def parse_selector(selector: str) -> dict[str, str]:
    """An equality-only label selector ("k=v,k2=v2"), the only kind this operator builds."""
    out = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.partition("=")
        out[key.strip()] = value.lstrip("=").strip()
    return out


def typed(api_version: str, kind: str) -> Callable[[Obj], Obj]:
    """Whole objects that say what they are: the items of a list response carry no apiVersion or
    kind (watch events do), and reconcile tells a LeaderWorkerSet from a Deployment by its kind."""
    def transform(obj: Obj) -> Obj:
        return {**strip_managed_fields(obj), "apiVersion": api_version, "kind": kind}
    return transform


# -- the informers ---------------------------------------------------------------------------

ChangeHandler = Callable[[Obj | None, Obj | None], None]


class Caches:
    """Every informer of the operator, and reads that never leave the process."""

    def __init__(self, kube: Kube, namespaces: list[str], *, on_infd: ChangeHandler | None = None,
                 on_child: ChangeHandler | None = None, on_node: ChangeHandler | None = None,
                 on_pod: ChangeHandler | None = None, on_contact: Callable[[bool], None] | None = None,
                 configmaps: tuple[tuple[str, str], ...] = (), page_size: int = 500) -> None:
        self.namespaces = list(namespaces)
        scopes = self.namespaces or [""]
        common = {"on_contact": on_contact, "page_size": page_size}

        def path(prefix: str, plural: str, ns: str) -> str:
            return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"

        # Children we are creating right now. The watch event of our own create can arrive before
        # the API server's answer is stored (observe_write); it is news to nobody then, and
        # reconciling for it would run the creating reconcile twice (the ReplicaSet controller's
        # "expectations", for one object each). Each entry ends with that answer or the failure.
        self._creating: set[tuple[str, str, str]] = set()
        self._creating_lock = threading.Lock()
        self._on_child = on_child

        self._by_kind: dict[tuple[str, str], dict[str, Informer]] = {}
        self._by_kind[INFD] = {ns: Informer(kube, f"InferenceDeployments{'/' + ns if ns else ''}",
                                            path(f"/apis/{api.GROUP}/{api.VERSION}", api.PLURAL, ns),
                                            on_change=on_infd, **common) for ns in scopes}
        for (api_version, kind), prefix in CHILD_KINDS.items():
            self._by_kind[(api_version, kind)] = {
                ns: Informer(kube, f"{kind}s{'/' + ns if ns else ''}", path(prefix, _PLURALS[kind], ns),
                             label_selector=INSTANCE_LABEL, on_change=self._child_changed,
                             transform=typed(api_version, kind),
                             optional=kind in _OPTIONAL_KINDS, **common)
                for ns in scopes}
        claims = ("v1", "PersistentVolumeClaim")
        self._by_kind[claims] = {
            ns: Informer(kube, f"PersistentVolumeClaims{'/' + ns if ns else ''}", path("/api/v1", "persistentvolumeclaims", ns),
                         label_selector=mc.CACHE_LABEL, transform=typed(*claims), **common)
            for ns in scopes}
        # Single objects, watched by name (RBAC can grant list/watch of named objects only with a
        # metadata.name field selector): read once per new plan, never from the API server.
        self._named: dict[tuple[str, str], Informer] = {
            (ns, name): Informer(kube, f"ConfigMap/{ns}/{name}", f"/api/v1/namespaces/{ns}/configmaps",
                                 field_selector=f"metadata.name={name}", transform=typed("v1", "ConfigMap"), **common)
            for ns, name in configmaps}
        self.node_informer = Informer(kube, "Nodes", "/api/v1/nodes", transform=slim_node, on_change=on_node,
                                      **common)
        self.pod_informer = Informer(kube, "Pods", "/api/v1/pods",
                                     field_selector="status.phase!=Succeeded,status.phase!=Failed",
                                     transform=slim_pod, index=_pod_index, on_change=on_pod, **common)

    @property
    def informers(self) -> list[Informer]:
        return [i for by_ns in self._by_kind.values() for i in by_ns.values()] + list(self._named.values()) + [
            self.node_informer, self.pod_informer]

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        threads = [threading.Thread(target=i.run, args=(stop,), name=f"informer-{i.name}", daemon=True)
                   for i in self.informers]
        for thread in threads:
            thread.start()
        return threads

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    # -- reads -------------------------------------------------------------------------------
    def _informer(self, api_version: str, kind: str, namespace: str) -> Informer | None:
        by_ns = self._by_kind.get((api_version, kind))
        if by_ns is None:
            return None
        found = by_ns.get(namespace)
        return found if found is not None else by_ns.get("")

    def named(self, api_version: str, kind: str, namespace: str, name: str) -> Informer | None:
        """The informer that watches exactly this object, if one does: what it lacks does not exist."""
        return self._named.get((namespace, name)) if (api_version, kind) == ("v1", "ConfigMap") else None

    def holds(self, api_version: str, kind: str, namespace: str) -> bool:
        return self._informer(api_version, kind, namespace) is not None

    def installed(self, api_version: str, kind: str, namespace: str) -> bool:
        informer = self._informer(api_version, kind, namespace)
        return informer is not None and informer.installed

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        informer = self._informer(api_version, kind, namespace)
        obj = informer.get((namespace, name)) if informer is not None else None
        # The InferenceDeployment is the one object callers build updates from: a copy, so no
        # caller can change the store by accident. Children are only compared.
        return copy.deepcopy(obj) if obj is not None and kind == api.KIND else obj

    def inference_deployments(self) -> list[Obj]:
        return [o for i in self._by_kind[INFD].values() for o in i.items()]

    def cache_claims(self) -> list[Obj]:
        """The model caches' claims (the model-cache label) in the watched namespaces."""
        return [o for i in self._by_kind[("v1", "PersistentVolumeClaim")].values() for o in i.items()]

    def nodes(self) -> list[Obj]:
        return self.node_informer.items()

    def gpu_pods(self) -> list[Obj]:
        return [p for p in self.pod_informer.items() if holds_gpus_now(p)]

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        wanted = parse_selector(selector)
        owner = wanted.get(INSTANCE_LABEL)
        candidates = (self.pod_informer.by_index((namespace, owner)) if owner is not None
                      else [p for p in self.pod_informer.items() if p["metadata"].get("namespace") == namespace])
        return [p for p in candidates
                if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]

    def observe_write(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        informer = self._informer(obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace") or "") \
            or self.named(obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))
        if informer is not None:
            informer.observe_write(obj)
        self.creation_settled(obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))

    # -- our own creations -------------------------------------------------------------------
    def creating(self, kind: str, namespace: str, name: str) -> None:
        with self._creating_lock:
            self._creating.add((kind, namespace, name))

    def creation_settled(self, kind: str, namespace: str, name: str) -> None:
        """The create was answered (stored by observe_write) or failed: events are news again."""
        with self._creating_lock:
            self._creating.discard((kind, namespace, name))

    def _child_changed(self, old: Obj | None, new: Obj | None) -> None:
        if old is None and new is not None:
            meta = new.get("metadata") or {}
            with self._creating_lock:
                ours = (new.get("kind", ""), meta.get("namespace") or "", meta.get("name", "")) in self._creating
            if ours:
                return
        if self._on_child is not None:
            self._on_child(old, new)


def _pod_index(pod: Obj) -> Hashable | None:
    return pod_owner(pod)


__all__ = ["Caches", "slim_node", "slim_pod", "strip_managed_fields"]
