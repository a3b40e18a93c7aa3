"""Thin access to the Kubernetes API as plain dicts, over the official client's ApiClient.

The generated typed models would force a round trip through Python classes for every object we
only compare and patch; the REST layer of `kubernetes.client.ApiClient` keeps its configuration,
auth and TLS handling while giving us JSON. Every call that writes is named for what it writes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import prometheus_client
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from shardwise import pricing
from shardwise.api import v1alpha1 as api
from shardwise.observe.operator_metrics import REGISTRY
from shardwise.render.labels import FIELD_MANAGER

if TYPE_CHECKING:
    from shardwise.controller.cache import Caches

ApiException = client.ApiException
log = logging.getLogger(__name__)
# Every request this process makes, by HTTP method (watches as WATCH): what the API server
# pays for us, idle or converging (bench/scale.py reads it).
API_REQUESTS = prometheus_client.Counter("shardwise_api_requests", "Requests sent to the Kubernetes API server.",
                                         ["verb"], registry=REGISTRY)

_PATHS = {
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "Event"): "/api/v1/namespaces/{ns}/events",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("v1", "PersistentVolumeClaim"): "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
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
        # The informers' stores (cache.py). Reads of a kind they hold come from there, like
        # controller-runtime's cache-backed client: a steady-state reconcile makes no read
        # request. Without it (tools, tests) every read goes to the API server.
        self.cache: Caches | None = None
        # Where events go: posted at once without one (tools, tests), or handed to the manager's
        # EventSink, which posts them from its own thread.
        self.event_sink: Callable[[dict[str, Any]], None] | None = None

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float = 30.0) -> Any:
        API_REQUESTS.labels(method).inc()
        method, url, headers, payload, _ = self._api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"],
        )
        response = self._api.call_api(method, url, header_params=headers, body=payload, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return json.loads(response.data) if response.data else None

    def watch(self, path: str, query: dict[str, Any], timeout_s: float) -> Iterator[dict[str, Any]]:
        """The events of one watch request, parsed one line at a time (never the whole stream)."""
        API_REQUESTS.labels("WATCH").inc()
        method, url, headers, _, _ = self._api.param_serialize(
            method="GET", resource_path=path, query_params=list({**query, "watch": "true"}.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = self._api.call_api(method, url, header_params=headers, _request_timeout=(10, timeout_s))
        if not 200 <= response.status < 300:
            response.read()
            raise ApiException(http_resp=response)
        raw = response.response
        try:
            for line in iter_resp_lines(raw):
                if line:
                    yield json.loads(line)
        finally:
            raw.release_conn()

    # -- reads ------------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, from the cache when an informer holds its kind.

        A child the cache lacks is read from the API server: the child informers only hold
        objects with our instance label, and a namesake someone else created must still be seen
        before we write. At steady state every child is in the cache, so this costs nothing.
        """
        named = self.cache.named(api_version, kind, namespace, name) if self.cache is not None else None
        if named is not None:
            return named.get((namespace, name))
        if self.cache is not None and self.cache.holds(api_version, kind, namespace):
            cached = self.cache.get(api_version, kind, namespace, name)
            if cached is not None or kind == api.KIND or not self.cache.installed(api_version, kind, namespace):
                return cached
        return self.get_live(api_version, kind, namespace, name)

    def get_cached(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Only what the cache holds (objects carrying our instance label); the API without one."""
        if self.cache is not None and self.cache.holds(api_version, kind, namespace):
            return self.cache.get(api_version, kind, namespace, name)
        return self.get_live(api_version, kind, namespace, name)

    def get_live(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"{collection_path(api_version, kind, namespace)}/{quote(name)}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_cluster_scoped(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return list(self.request("GET", path, query=query or None).get("items", []))

    def list_nodes(self) -> list[dict[str, Any]]:
        if self.cache is not None:
            return self.cache.nodes()
        return self.list("/api/v1/nodes")

    def list_gpu_pods(self) -> list[dict[str, Any]]:
        """Pods that may hold GPUs (not Succeeded/Failed), cluster-wide: free GPUs per node."""
        if self.cache is not None:
            return self.cache.gpu_pods()
        return self.list("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed")

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching an equality label selector ("k=v,k2=v2") in one namespace."""
        if self.cache is not None:
            return self.cache.pods(namespace, selector)
        return self.list(collection_path("v1", "Pod", namespace), labelSelector=selector)

    def pricing_table(self, namespace: str, configmap: str) -> dict[str, float]:
        """The cluster pricing table: a ConfigMap keyed by GFD product string, $ per GPU-hour."""
        cm = self.get("v1", "ConfigMap", namespace, configmap)
        prices, problems = pricing.price_table((cm or {}).get("data") or {})
        for problem in problems:
            log.warning("pricing ConfigMap %s: %s", configmap, problem)
        return prices

    def list_cache_claims(self, label: str) -> list[dict[str, Any]]:
        """The model caches' claims: from the informer, or cluster-wide from the API."""
        if self.cache is not None:
            return self.cache.cache_claims()
        return self.list("/api/v1/persistentvolumeclaims", labelSelector=label)

    def list_inference_deployments(self) -> list[dict[str, Any]]:
        if self.cache is not None:
            return self.cache.inference_deployments()
        return self.list(f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}")

    # -- writes -----------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply under shardwise's one field manager; `force` only on objects we control."""
        meta = obj["metadata"]
        path = f"{collection_path(obj['apiVersion'], obj['kind'], meta['namespace'])}/{quote(meta['name'])}"
        # Not forced: nothing of ours is there yet, so this creates (reconcile forces only on
        # objects it controls). Its watch event may beat the answer: see Caches.creating.
        creating = None if force else self.cache
        if creating is not None:
            creating.creating(obj["kind"], meta["namespace"], meta["name"])
        try:
            live = self.request("PATCH", path, query={"fieldManager": FIELD_MANAGER, "force": str(force).lower()},
                                body=obj, content_type="application/apply-patch+yaml")
        except BaseException:
            if creating is not None:
                creating.creation_settled(obj["kind"], meta["namespace"], meta["name"])
            raise
        if self.cache is not None:  # our own write, seen before its watch event arrives
            self.cache.observe_write(live)
        return live

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

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        """Merge-patch status, only if the object is still at `resource_version` (else HTTP 409).

        The precondition is what keeps two writers (reconcile, observer, autoscaler, or a second
        operator) from undoing each other's change to the one `conditions` list: whoever wrote
        from a stale copy gets a conflict and recomputes from the fresh object.
        """
        path = f"{collection_path(f'{api.GROUP}/{api.VERSION}', api.KIND, namespace)}/{quote(name)}/status"
        body: dict[str, Any] = {"status": status_patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        live = self.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        if self.cache is not None:
            self.cache.observe_write(live)
        return live

    def create_event(self, event: dict[str, Any]) -> None:
        if self.event_sink is not None:
            self.event_sink(event)
        else:
            self.post_event(event)

    def post_event(self, event: dict[str, Any]) -> None:
        self.request("POST", collection_path("v1", "Event", event["metadata"]["namespace"]), body=event)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the API server asked us to wait (HTTP 429 or 503 with Retry-After), if it did."""
    if not isinstance(exc, ApiException) or exc.status not in (429, 503):
        return None
    value = (exc.headers or {}).get("Retry-After") if exc.headers else None
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0
