"""Thin access to the Kubernetes API as plain dicts, over the official client's ApiClient.

The generated typed models would force a round trip through Python classes for every object we
only compare and patch; the REST layer of `kubernetes.client.ApiClient` keeps its configuration,
auth and TLS handling while giving us JSON. Every call that writes is named for what it writes.

This is the API client only: it reads nothing from informers. A process that keeps caches hands
the client a `WriteObserver` (its caches), so its own writes are seen before their watch events.
Kinds beyond the built-in ones (custom resources) are made known with `register_kind`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from typing import Protocol

import prometheus_client
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

ApiException = client.ApiException
log = logging.getLogger(__name__)
# Every request this process makes, by HTTP method (watches as WATCH): what the API server
# pays for us, idle or converging (bench/scale.py reads it). Registered by the process that
# serves it: the machinery owns no registry.
API_REQUESTS = prometheus_client.Counter("shardwise_api_requests", "Requests sent to the Kubernetes API server.",
                                         ["verb"], registry=None)

_PATHS = {
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "Event"): "/api/v1/namespaces/{ns}/events",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("v1", "PersistentVolumeClaim"): "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
}


def register_kind(api_version: str, kind: str, plural: str) -> None:
    """Make a namespaced custom resource's paths known (the built-in kinds are in the table)."""
    _PATHS[(api_version, kind)] = f"/apis/{api_version}/namespaces/{{ns}}/{plural}"


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    return _PATHS[(api_version, kind)].format(ns=quote(namespace))


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{quote(name)}"


class WriteObserver(Protocol):
    """Caches that want to see this client's writes before their watch events arrive."""

    def creating(self, kind: str, namespace: str, name: str) -> None: ...
    def creation_settled(self, kind: str, namespace: str, name: str) -> None: ...
    def observe_write(self, obj: dict[str, Any]) -> None: ...


class Kube:
    """One API client for a process; safe to share between threads.

    `field_manager` names every server-side apply; `observer` (the process's caches, if any) sees
    each write's answer at once; `event_sink`, if set, takes events instead of posting them here
    (the manager's EventSink posts them from its own thread).
    """

    def __init__(self, api_client: client.ApiClient | None = None, *, field_manager: str = "shardwise") -> None:
        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self._api = api_client
        self.field_manager = field_manager
        self.observer: WriteObserver | None = None
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

    # -- reads (always from the API server) ---------------------------------------------------
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

    # -- writes -----------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply under shardwise's one field manager; `force` only on objects we control."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        # Not forced: nothing of ours is there yet, so this creates (reconcile forces only on
        # objects it controls). Its watch event may beat the answer: see Caches.creating.
        creating = None if force else self.observer
        if creating is not None:
            creating.creating(obj["kind"], meta["namespace"], meta["name"])
        try:
            live = self.request("PATCH", path, query={"fieldManager": self.field_manager, "force": str(force).lower()},
                                body=obj, content_type="application/apply-patch+yaml")
        except BaseException:
            if creating is not None:
                creating.creation_settled(obj["kind"], meta["namespace"], meta["name"])
            raise
        if self.observer is not None:  # our own write, seen before its watch event arrives
            self.observer.observe_write(live)
        return live

    def patch_metadata(self, obj: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch labels or annotations of an object (None values remove keys)."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return self.request("PATCH", path, body={"metadata": metadata}, content_type="application/merge-patch+json")

    def delete_owned(self, obj: dict[str, Any]) -> None:
        """Delete exactly this object (uid precondition): never a namesake created since we looked."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                "preconditions": {"uid": meta["uid"]}}
        try:
            self.request("DELETE", path, body=body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        """Merge-patch status, only if the object is still at `resource_version` (else HTTP 409).

        The precondition is what keeps two writers (reconcile, observer, autoscaler, or a second
        operator) from undoing each other's change to the one `conditions` list: whoever wrote
        from a stale copy gets a conflict and recomputes from the fresh object.
        """
        path = f"{object_path(api_version, kind, namespace, name)}/status"
        body: dict[str, Any] = {"status": status_patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        live = self.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        if self.observer is not None:
            self.observer.observe_write(live)
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
