"""Reads from the informers' caches, writes to the API: controller-runtime's delegating client.

The operator's loops (reconcile's gather and act steps, the observer, the autoscaler, the model
cache loop) see the cluster through this one object. With caches (the running operator), every
read of a kind an informer holds comes from memory, so a steady-state reconcile makes no read
request; without them (tools, tests) reads go to the API server. Writes always go to the API;
the caches see each answer at once (`Kube.observer`), before its watch event.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from shardwise import pricing
from shardwise.api import v1alpha1 as api
from shardwise.kube.client import Kube

if TYPE_CHECKING:
    from shardwise.controller.cache import Caches

log = logging.getLogger(__name__)
INFD_API_VERSION = f"{api.GROUP}/{api.VERSION}"


class Cluster:
    """One per process; safe to share between threads (the caches and the client both are)."""

    def __init__(self, kube: Kube, caches: Caches | None = None) -> None:
        self.api = kube
        self.caches = caches
        if caches is not None:
            kube.observer = caches

    # -- reads -------------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, from the cache when an informer holds its kind.

        A child the cache lacks is read from the API server: the child informers only hold
        objects with our instance label, and a namesake someone else created must still be seen
        before we write. At steady state every child is in the cache, so this costs nothing.
        """
        caches = self.caches
        named = caches.named(api_version, kind, namespace, name) if caches is not None else None
        if named is not None:
            return named.get((namespace, name))
        if caches is not None and caches.holds(api_version, kind, namespace):
            cached = caches.get(api_version, kind, namespace, name)
            if cached is not None or kind == api.KIND or not caches.installed(api_version, kind, namespace):
                return cached
        return self.api.get_live(api_version, kind, namespace, name)

    def get_cached(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Only what the cache holds (objects carrying our instance label); the API without one."""
        if self.caches is not None and self.caches.holds(api_version, kind, namespace):
            return self.caches.get(api_version, kind, namespace, name)
        return self.api.get_live(api_version, kind, namespace, name)

    def installed(self, api_version: str, kind: str, namespace: str) -> bool:
        """Is the kind served (its CRD installed)? Known from the informer; assumed without one."""
        return self.caches is None or not self.caches.holds(api_version, kind, namespace) or \
            self.caches.installed(api_version, kind, namespace)

    def list_nodes(self) -> list[dict[str, Any]]:
        if self.caches is not None:
            return self.caches.nodes()
        return self.api.list("/api/v1/nodes")

    def list_gpu_pods(self) -> list[dict[str, Any]]:
        """Pods that may hold GPUs (not Succeeded/Failed), cluster-wide: free GPUs per node."""
        if self.caches is not None:
            return self.caches.gpu_pods()
        return self.api.list("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed")

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching an equality label selector ("k=v,k2=v2") in one namespace."""
        if self.caches is not None:
            return self.caches.pods(namespace, selector)
        return self.api.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)

    def pricing_table(self, namespace: str, configmap: str) -> dict[str, float]:
        """The cluster pricing table: a ConfigMap keyed by GFD product string, $ per GPU-hour."""
        cm = self.get("v1", "ConfigMap", namespace, configmap)
        prices, problems = pricing.price_table((cm or {}).get("data") or {})
        for problem in problems:
            log.warning("pricing ConfigMap %s: %s", configmap, problem)
        return prices

    def list_cache_claims(self, label: str) -> list[dict[str, Any]]:
        """The model caches' claims: from the informer, or cluster-wide from the API."""
        if self.caches is not None:
            return self.caches.cache_claims()
        return self.api.list("/api/v1/persistentvolumeclaims", labelSelector=label)

    def list_inference_deployments(self) -> list[dict[str, Any]]:
        if self.caches is not None:
            return self.caches.inference_deployments()
        return self.api.list(f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}")

    # -- live reads (what no informer holds) and writes: straight to the API ------------------
    def get_live(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.get_live(api_version, kind, namespace, name)

    def get_cluster_scoped(self, path: str) -> dict[str, Any] | None:
        return self.api.get_cluster_scoped(path)

    def list(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return self.api.list(path, **query)

    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        return self.api.apply(obj, force=force)

    def patch_metadata(self, obj: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        return self.api.patch_metadata(obj, metadata)

    def delete_owned(self, obj: dict[str, Any]) -> None:
        self.api.delete_owned(obj)

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        """Merge-patch an InferenceDeployment's status, conditional on `resource_version`."""
        return self.api.patch_status(INFD_API_VERSION, api.KIND, namespace, name, status_patch,
                                     resource_version=resource_version)

    def create_event(self, event: dict[str, Any]) -> None:
        self.api.create_event(event)
