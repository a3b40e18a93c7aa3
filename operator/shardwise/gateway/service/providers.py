"""Hosted providers in the gateway process: the live catalogue, a request to a hosted model routed,
and (with a cluster) the informers and the Providers' Reachable condition.

`Book` holds the catalogue (decide/providers.py) and the requests in flight per provider; the
ext_proc service asks it for a model no InferenceDeployment serves. `Watch` feeds it from the
cluster: Providers and the Secrets labelled `shardwise.io/provider-secret=true` in the watched
namespaces; every change rebuilds the catalogue and the CDS clusters on the event loop, and the
Reachable condition of each Provider is written when it changes (with an event on a change to
False), from the objects (SecretMissing, KeyMissing, CABundleMissing) and a TLS handshake with the
provider's host every `probe_interval_s` (Unreachable, TLSFailed).

The key: read from the Secret into the catalogue, sent only in the routed answer's header
mutation; logs, conditions, events and metric labels carry the Provider's namespace/name only.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from shardwise.api import providers as api
from shardwise.gateway import metrics
from shardwise.gateway.dataplane import extproc_messages as messages
from shardwise.gateway.dataplane import providers as dataplane
from shardwise.gateway.decide import providers, requests
from shardwise.gateway.service.coalesce import CoalescedRebuild
from shardwise.kube.client import ApiException, Kube, register_kind
from shardwise.kube.informer import Informer
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)

register_kind(f"{api.GROUP}/{api.VERSION}", api.KIND, api.PLURAL)


class Book:
    def __init__(self, cds: dataplane.ClusterDiscovery | None = None) -> None:
        self.catalogue = providers.EMPTY
        self.cds = cds or dataplane.ClusterDiscovery()
        self.in_flight: dict[str, int] = {}

    def set_catalogue(self, catalogue: providers.Catalogue) -> None:
        if catalogue.conflicts != self.catalogue.conflicts:
            for conflict in catalogue.conflicts:
                log.warning("not routed: %s", conflict)
        for pid in sorted(set(catalogue.problems) - set(self.catalogue.problems)):
            log.warning("Provider %s not usable: %s", pid, catalogue.problems[pid].reason)
        self.catalogue = catalogue
        self.cds.update(catalogue)

    def hosted(self) -> list[providers.HostedModel]:
        return sorted(self.catalogue.models.values(), key=lambda m: m.model)

    def get(self, model: str) -> providers.HostedModel | None:
        return self.catalogue.get(model)

    def price_of(self, model: str) -> providers.Prices | None:
        hosted = self.catalogue.get(model)
        return hosted.prices if hosted is not None else None

    async def serve(self, hosted: providers.HostedModel, path: str, body: dict[str, Any], key_id: str | None,
                    stream: AsyncIterator[pb.ProcessingRequest]) -> AsyncIterator[pb.ProcessingResponse]:
        """The routed answer (or the 429 of the provider's cap), then the wait for the request's end:
        until then it counts against the cap, as a pick counts as outstanding on its engine."""
        upstream = self.catalogue.upstream_of(hosted)
        if self.in_flight.get(upstream.id, 0) >= upstream.max_concurrent:
            refusal = providers.over_capacity(upstream.id, upstream.max_concurrent)
            metrics.REQUESTS.labels(hosted.model, str(refusal.status)).inc()
            yield messages.immediate(refusal, "shardwise_provider_busy")
            return
        if key_id is not None:  # a key is charged from the usage: a stream must report it
            mutated = requests.with_stream_usage(path, body)
            if mutated is not None:
                body = json.loads(mutated)
        self.in_flight[upstream.id] = self.in_flight.get(upstream.id, 0) + 1
        try:
            yield dataplane.routed(upstream, hosted, path, providers.rewrite_body(body, hosted.upstream_id),
                                   key_id=key_id)
            async for _ in stream:  # nothing more is sent; the request's end closes the stream
                pass
        finally:
            left = self.in_flight.get(upstream.id, 0) - 1
            if left > 0:
                self.in_flight[upstream.id] = left
            else:
                self.in_flight.pop(upstream.id, None)


def slim_provider(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion", "generation", "uid",
                                              "creationTimestamp", "deletionTimestamp") if k in meta},
            "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}


def slim_secret(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}, "data": obj.get("data") or {}}


async def probe(upstream: providers.Upstream, system_ca_file: str, timeout_s: float) -> tuple[str, str] | None:
    """A TLS handshake with the provider's host, checked as Envoy checks it: None, or (reason, message)."""
    context = ssl.create_default_context(cafile=None if upstream.ca_pem else system_ca_file,
                                         cadata=upstream.ca_pem or None)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(
            upstream.host, upstream.port, ssl=context, server_hostname=upstream.host), timeout_s)
    except ssl.SSLError as exc:
        return providers.TLS_FAILED, f"TLS with {upstream.host}:{upstream.port} failed: {exc.reason or exc}"
    except (OSError, TimeoutError) as exc:
        return providers.UNREACHABLE, f"{upstream.host}:{upstream.port} unreachable: {exc or type(exc).__name__}"
    writer.close()
    return None


class Watch(CoalescedRebuild):
    """The informers, the rebuild and the condition writer; `self_hosted` names what deployments serve
    (None until they are listed: no catalogue before then)."""

    def __init__(self, kube: Kube, book: Book, namespaces: tuple[str, ...], *,
                 self_hosted: Callable[[], Iterable[str] | None] = tuple, system_ca_file: str = dataplane.SYSTEM_CA_FILE,
                 probe_interval_s: float = 30.0, on_contact: Callable[[bool], None] | None = None) -> None:
        self.kube, self.book, self.self_hosted = kube, book, self_hosted
        self.system_ca_file, self.probe_interval_s = system_ca_file, probe_interval_s
        self.providers: list[Informer] = []
        self.secrets: list[Informer] = []
        prefix = f"/apis/{api.GROUP}/{api.VERSION}"
        for ns in namespaces or ("",):
            scope = f"/namespaces/{ns}" if ns else ""
            self.providers.append(Informer(kube, f"Provider{scope}", f"{prefix}{scope}/{api.PLURAL}",
                                           transform=slim_provider, on_change=self._changed, on_contact=on_contact))
            self.secrets.append(Informer(kube, f"ProviderSecret{scope}", f"/api/v1{scope}/secrets",
                                         label_selector=f"{providers.SECRET_LABEL}=true", transform=slim_secret,
                                         on_change=self._changed, on_contact=on_contact))
        self.informers = self.providers + self.secrets
        self.probed: dict[str, tuple[str, str] | None] = {}
        self._write_log = QuietLog(log, "Provider status write")

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        return [threading.Thread(target=i.run, args=(stop,), name=i.name, daemon=True) for i in self.informers]

    def changed(self) -> None:
        """Deployments changed (a name may have become self-hosted): rebuild too. Any thread."""
        self._changed(None, None)

    def rebuild(self) -> None:
        self_hosted = self.self_hosted()
        if self_hosted is None:  # the deployments not listed yet: a name they serve must never go to a provider
            return
        objects = [o for i in self.providers for o in i.items() if not o["metadata"].get("deletionTimestamp")]
        self.book.set_catalogue(providers.build(objects, [s for i in self.secrets for s in i.items()], self_hosted))

    def desired(self, obj: dict[str, Any]) -> tuple[str, str, str]:
        pid = f"{obj['metadata'].get('namespace', '')}/{obj['metadata'].get('name', '')}"
        problem = self.book.catalogue.problems.get(pid)
        if problem is None and self.probed.get(pid) is not None:
            reason, message = self.probed[pid]  # type: ignore[misc]
            problem = providers.Problem(reason, message)
        return providers.condition(problem)

    async def run(self) -> None:
        """Probe and write, every probe interval (the first round at once)."""
        while True:
            try:
                await self.round()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                self._write_log.failure(exc)
            await asyncio.sleep(self.probe_interval_s)

    async def round(self) -> int:
        catalogue = self.book.catalogue
        results = await asyncio.gather(*(probe(u, self.system_ca_file, u.connect_timeout_s)
                                         for u in catalogue.upstreams.values()))
        self.probed = dict(zip(catalogue.upstreams, results))
        written = 0
        for obj in [o for i in self.providers for o in i.items() if not o["metadata"].get("deletionTimestamp")]:
            if await self._write(obj, *self.desired(obj)):
                written += 1
        self._write_log.success()
        return written

    async def _write(self, obj: dict[str, Any], status: str, reason: str, message: str) -> bool:
        meta = obj["metadata"]
        old = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Reachable"), None)
        generation = meta.get("generation")
        if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message) \
                and (obj.get("status") or {}).get("observedGeneration") == generation:
            return False
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        since = old["lastTransitionTime"] if old is not None and old.get("status") == status else now
        condition = {"type": "Reachable", "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": since, "observedGeneration": generation}
        try:
            await asyncio.to_thread(self.kube.patch_status, f"{api.GROUP}/{api.VERSION}", api.KIND, meta["namespace"],
                                    meta["name"], {"conditions": [condition], "observedGeneration": generation},
                                    resource_version=meta.get("resourceVersion"))
        except ApiException as exc:
            if exc.status not in (404, 409):
                self._write_log.failure(exc)
            return False
        if status == "False" and (old is None or old.get("reason") != reason):
            await asyncio.to_thread(self._event, obj, reason, message)
        return True

    def _event(self, obj: dict[str, Any], reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.kube.create_event({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND,
                                   "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
                "reason": reason, "message": message, "type": "Warning",
                "source": {"component": "shardwise-gateway"}, "firstTimestamp": now[:19] + "Z",
                "lastTimestamp": now[:19] + "Z", "count": 1})
        except ApiException as exc:
            self._write_log.failure(exc)
