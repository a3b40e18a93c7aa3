"""Thin access to the Kubernetes API as plain dicts, over the official client's ApiClient.

The generated typed models would force a round trip through Python classes for every object we
only compare and patch; the REST layer of `kubernetes.client.ApiClient` keeps its configuration,
auth and TLS handling while giving us JSON. Every call that writes is named for what it writes.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from kubernetes import client, config

from shardwise.api import v1alpha1 as api
from shardwise.controller.cache import ClusterCache
from shardwise.render.labels import FIELD_MANAGER

ApiException = client.ApiException
log = logging.getLogger(__name__)

_PATHS = {
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "Event"): "/api/v1/namespaces/{ns}/events",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
    (f"{api.GROUP}/{api.VERSION}", api.KIND): f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{{ns}}/{api.PLURAL}",
}


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    return _PATHS[(api_version, kind)].format(ns=quote(namespace))


class Kube:
    """One API client for the operator; safe to share between handler threads."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self._api = api_client
        # Fed by watch events (handlers.py); reads fall back to listing until it is warm.
        self.cache: ClusterCache | None = None

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json") -> Any:
        method, url, headers, payload, _ = self._api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"],
        )
        response = self._api.call_api(method, url, header_params=headers, body=payload, _request_timeout=30)
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return json.loads(response.data) if response.data else None

    # -- reads ------------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"{collection_path(api_version, kind, namespace)}/{quote(name)}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return list(self.request("GET", path, query=query or None).get("items", []))

    def list_nodes(self) -> list[dict[str, Any]]:
        cached = self.cache.nodes() if self.cache else None
        return cached if cached is not None else self.list("/api/v1/nodes")

    def list_gpu_pods(self) -> list[dict[str, Any]]:
        """Pods that may hold GPUs (not Succeeded/Failed), cluster-wide: free GPUs per node."""
        cached = self.cache.gpu_pods() if self.cache else None
        if cached is not None:
            return cached
        return self.list("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed")

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.list(collection_path("v1", "Pod", namespace), labelSelector=selector)

    def pricing_table(self, namespace: str, configmap: str) -> dict[str, float]:
        """The cluster pricing table: a ConfigMap keyed by GFD product string, $ per GPU-hour."""
        cm = self.get("v1", "ConfigMap", namespace, configmap)
        prices: dict[str, float] = {}
        for product, value in ((cm or {}).get("data") or {}).items():
            try:
                prices[product] = float(value)
            except ValueError:
                log.warning("pricing ConfigMap %s: %s=%r is not a number; ignored", configmap, product, value)
        return prices

    def list_inference_deployments(self) -> list[dict[str, Any]]:
        return self.list(f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}")

    # -- writes -----------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply under shardwise's one field manager (forcing: we own these objects)."""
        meta = obj["metadata"]
        path = f"{collection_path(obj['apiVersion'], obj['kind'], meta['namespace'])}/{quote(meta['name'])}"
        return self.request("PATCH", path, query={"fieldManager": FIELD_MANAGER, "force": "true"},
                            body=obj, content_type="application/apply-patch+yaml")

    def delete_owned(self, obj: dict[str, Any]) -> None:
        """Delete exactly this object (uid precondition): never a namesake created since we looked."""
        meta = obj["metadata"]
        path = f"{collection_path(obj['apiVersion'], obj['kind'], meta['namespace'])}/{quote(meta['name'])}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                "preconditions": {"uid": meta["uid"]}}
        try:
            self.request("DELETE", path, body=body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any]) -> dict[str, Any]:
        path = f"{collection_path(f'{api.GROUP}/{api.VERSION}', api.KIND, namespace)}/{quote(name)}/status"
        return self.request("PATCH", path, body={"status": status_patch}, content_type="application/merge-patch+json")

    def create_event(self, event: dict[str, Any]) -> None:
        self.request("POST", collection_path("v1", "Event", event["metadata"]["namespace"]), body=event)
