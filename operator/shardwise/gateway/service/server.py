"""The gateway process: informers in, ext_proc and the observe access log over gRPC, metrics and probes on the side.

Wiring only. Two informers per watched namespace (or one pair cluster-wide): InferenceDeployments
and the pods labelled `shardwise.io/inference-deployment`, slimmed to what routing reads. Every
change rebuilds the model table on the event loop (coalesced: a burst of pod events is one
rebuild). Until every informer has listed once, no request is routed (they wait, bounded). The
engines the table routes to are scraped every few seconds for their queue and KV-cache use. The
wake signal is a merge patch of one annotation, written from a worker thread. SIGTERM answers
every held request with a 503 before the gRPC server stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import signal
import threading
from typing import Any

import aiohttp
import grpc
import prometheus_client
from aiohttp import web
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.api import v1alpha1 as api
from shardwise.gateway import metrics
from shardwise.gateway.console import page as console, web as consoleweb
from shardwise.gateway.dataplane import fastpath, keys_lua, xds
from shardwise.gateway.decide import holding, overload, picker, routes
from shardwise.gateway.service import enginestats, extproc, prefill
from shardwise.gateway.service import events as event_hooks
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.service.gatekeeper import AuthSettings, Gatekeeper
from shardwise.gateway.service.observer import AccessLog, Observer
from shardwise.kube import health
from shardwise.kube.client import Kube
from shardwise.kube.informer import Informer, wait_for_sync
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)

WAKE_ANNOTATION = "shardwise.io/wake-requested"
# The series labelled by caller: only on the metrics port (tests/unit/gateway checks none is missed).
PER_KEY = (metrics.KEY_REQUESTS, metrics.KEY_TOKENS, metrics.KEY_COST, metrics.RATE_LIMITED)


@dataclasses.dataclass(frozen=True)
class Settings:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 9002
    http_host: str = "0.0.0.0"
    http_port: int = 9090  # probes, the console, /metrics without the per-key series
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9091  # /metrics with every series, per key included: for Prometheus only
    limits: holding.Limits = holding.Limits()
    wake_interval_s: float = 5.0
    scrape_interval_s: float = 2.0
    tick_s: float = 0.5
    auth: AuthSettings | None = None  # None: no API keys (every caller is served)
    fast_path: bool = True  # Envoy routes the requests it can by itself (fastpath.py; with keys: keys_lua.py)
    providers: bool = False  # hosted providers (service/providers.py); Envoy needs `envoy-config --providers`
    system_ca_file: str = "/etc/ssl/certs/ca-certificates.crt"  # the trust of Providers without a CA bundle
    provider_probe_interval_s: float = 30.0
    pd_min_prompt_tokens: int = 256  # decide/disaggregation.DEFAULT_MIN_PROMPT_TOKENS
    usage_stdout: bool = False  # a usage record per request as a JSON line on stdout (docs/usage-export.md)
    usage_webhooks: tuple[Any, ...] = ()  # export.WebhookSettings: signed NDJSON batches
    event_webhooks: tuple[Any, ...] = ()  # export.WebhookSettings for service/events.py's transitions


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    loaded = (meta.get("annotations") or {}).get(routes.LOADED_ADAPTERS_ANNOTATION)
    return {"metadata": {**{k: meta[k] for k in ("name", "namespace", "labels", "resourceVersion", "deletionTimestamp")
                            if k in meta},
                         **({"annotations": {routes.LOADED_ADAPTERS_ANNOTATION: loaded}} if loaded else {})},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},  # P/D pairs kept on a node
            "status": {"podIP": status.get("podIP"),
                       "conditions": [c for c in status.get("conditions") or () if c.get("type") == "Ready"]}}


def slim_infd(infd: dict[str, Any]) -> dict[str, Any]:
    meta, spec = infd.get("metadata") or {}, infd.get("spec") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "resourceVersion", "creationTimestamp", "deletionTimestamp")
            if k in meta}
    slim_spec: dict[str, Any] = {"model": {"servedName": (spec.get("model") or {}).get("servedName")}}
    for key in ("replicas", "autoscaling", "spillover"):
        if key in spec:
            slim_spec[key] = spec[key]
    if spec.get("adapters"):
        slim_spec["adapters"] = [{"name": a.get("name")} for a in spec["adapters"] if isinstance(a, dict)]
    status = infd.get("status") or {}
    return {"metadata": keep, "spec": slim_spec, "console": console.figures(infd),
            "status": {"desiredReplicas": status.get("desiredReplicas"),
                       **({"adapters": [{k: a.get(k) for k in ("name", "reason", "message")}
                                        for a in status["adapters"] if isinstance(a, dict)]}
                          if status.get("adapters") else {}),
                       "cost": {"perMillionOutputTokensUSD": ((infd.get("status") or {}).get("cost") or {})
                                .get("perMillionOutputTokensUSD")}}}


class WithoutKeys:
    """The registry as the public /metrics shows it: no family labelled by key (usage, cost, 429s per
    caller), which belongs to whoever may read APIKeys and reaches the metrics port only."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Any:
        per_key = {f.name for c in PER_KEY for f in c.collect()}
        return (f for f in self.registry.collect() if f.name not in per_key)


def wake_patch(now: datetime.datetime) -> dict[str, Any]:
    """The wake signal's body: the annotation holds when a request last asked (RFC 3339, UTC)."""
    return {"metadata": {"annotations": {WAKE_ANNOTATION: now.astimezone(datetime.timezone.utc)
                                         .strftime("%Y-%m-%dT%H:%M:%SZ")}}}


class Gateway:
    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube, self.settings = kube, settings
        self.stop = threading.Event()
        self.contact = health.ApiContact()
        self.dispatcher: Dispatcher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rebuild_pending = False
        self._wake_log = QuietLog(log, "wake annotation")
        self._scrape_log = QuietLog(log, "engine metrics scrape")
        self.infds: list[Informer] = []
        self.pods: list[Informer] = []
        prefix = f"/apis/{api.GROUP}/{api.VERSION}"
        for ns in settings.namespaces or ("",):
            scope = f"/namespaces/{ns}" if ns else ""
            self.infds.append(Informer(kube, f"InferenceDeployment{scope}", f"{prefix}{scope}/{api.PLURAL}",
                                       transform=slim_infd, on_change=self._changed, on_contact=self.contact.mark))
            self.pods.append(Informer(kube, f"Pod{scope}", f"/api/v1{scope}/pods", label_selector=routes.INSTANCE_LABEL,
                                      transform=slim_pod, on_change=self._changed, on_contact=self.contact.mark))
        self.threads = [threading.Thread(target=i.run, args=(self.stop,), name=i.name, daemon=True)
                        for i in self.infds + self.pods]
        self.gatekeeper: Gatekeeper | None = None
        self.keyring: Any = None
        # Envoy's routes: none are sent before the informers sync (Envoy keeps what it has, or waits).
        self.discovery = xds.Discovery()
        self._spared: overload.Spared = frozenset()  # engines out of a model's fast path (overload.py)
        self.providers: Any = None  # service/providers.Book and Watch, with --providers
        self.provider_watch: Any = None
        if settings.providers:
            from shardwise.gateway.service import providers as hosted

            self.providers = hosted.Book(hosted.dataplane.ClusterDiscovery(settings.system_ca_file))
            self.provider_watch = hosted.Watch(
                kube, self.providers, settings.namespaces, system_ca_file=settings.system_ca_file,
                probe_interval_s=settings.provider_probe_interval_s, on_contact=self.contact.mark,
                self_hosted=lambda: list(self.dispatcher.table.routes)
                if self.dispatcher is not None and self.dispatcher.synced.is_set() else None)
            self.threads += self.provider_watch.threads(self.stop)
        if settings.auth is not None:  # API keys: their informers, the quota store, the status writer
            from shardwise.gateway.service.keyring import Keyring

            self.gatekeeper = Gatekeeper(settings.auth, price_of=self._price_of, cost_of=self._hosted_cost)
            self.keyring = Keyring(kube, self.gatekeeper, settings.namespaces, on_contact=self.contact.mark)
            self.gatekeeper.on_table = self._keys_changed
            self.threads += self.keyring.threads(self.stop)
        self.export: Any = None  # service/export.Export, with --usage-stdout or --usage-webhook
        if settings.usage_stdout or settings.usage_webhooks:
            from shardwise.gateway.service import export

            sinks: list[Any] = [export.StdoutSink()] if settings.usage_stdout else []
            sinks += [export.WebhookSink(w) for w in settings.usage_webhooks]
            self.export = export.Export(sinks, price_of=self._price_of, cost_of=self._hosted_cost,
                                        served_of=self._served_of)
        self.events: Any = None  # service/events.Events, with --event-webhook
        if settings.event_webhooks:
            self.events = self._event_feed(settings)

    def _event_feed(self, settings: Settings) -> Any:
        """Event webhooks (service/events.py) over the informers' caches and the key table."""
        gate, keyring, provider_watch = self.gatekeeper, self.keyring, self.provider_watch
        return event_hooks.Events(
            [event_hooks.EventSink(w) for w in settings.event_webhooks],
            deployments=lambda: [o for i in self.infds for o in i.items()],
            providers=(lambda: [o for i in provider_watch.providers for o in i.items()]) if provider_watch else None,
            key_versions=(lambda: event_hooks.key_versions([o for i in keyring.apikeys for o in i.items()],
                                                           [k.id for k in gate.table.by_hash.values()]))
            if keyring is not None and gate is not None else None,
            key_table=(lambda: {k.id: k for k in gate.table.by_hash.values()}) if gate is not None else None)

    def _served_of(self, model: str, endpoint: str | None) -> Any:
        """Who served a request to `model` (its usage record): the deployment's engine, or the provider."""
        from shardwise.gateway.decide import records

        route = self.dispatcher.table.get(model) if self.dispatcher is not None else None
        if route is not None:
            return records.Served(records.ENGINE, endpoint or "", route.namespace)
        hosted = self.providers.get(model) if self.providers is not None else None
        if hosted is not None:
            return records.Served(records.PROVIDER, hosted.provider, hosted.namespace)
        return records.Served(records.ENGINE, endpoint, None) if endpoint else None

    def _hosted_cost(self, model: str, prompt: int, completion: int, cached: int = 0) -> int | None:
        """micro-USD at the provider's prices for a hosted model (not one a deployment serves)."""
        if self.providers is None or (self.dispatcher is not None and self.dispatcher.table.get(model) is not None):
            return None
        from shardwise.gateway.decide.providers import cost_micro_usd

        prices = self.providers.price_of(model)
        return cost_micro_usd(prices, prompt, completion, cached) if prices is not None else None

    def _price_of(self, model: str) -> float | None:
        route = self.dispatcher.table.get(model) if self.dispatcher is not None else None
        return route.usd_per_million_output_tokens if route is not None else None

    # -- informers -> table -----------------------------------------------------------------
    def _changed(self, old: Any, new: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._schedule_rebuild)

    def _schedule_rebuild(self) -> None:
        if not self._rebuild_pending:
            self._rebuild_pending = True
            asyncio.get_running_loop().call_soon(self._rebuild)

    def _rebuild(self) -> None:
        self._rebuild_pending = False
        if self.dispatcher is None or not self.dispatcher.synced.is_set():
            return
        table = routes.build_table([o for i in self.infds for o in i.items()], [o for i in self.pods for o in i.items()])
        if table.conflicts != self.dispatcher.table.conflicts:
            for conflict in table.conflicts:
                log.warning("not routed: %s", conflict)
        self.dispatcher.set_table(table)
        self.discovery.update(self._snapshot(table))
        if self.provider_watch is not None:  # a name now self-hosted leaves the providers' catalogue
            self.provider_watch.rebuild()

    def _snapshot(self, table: routes.Table) -> fastpath.Snapshot:
        keyed = keys_lua.metadata(self.gatekeeper.table) if self.gatekeeper is not None else None
        snapshot = fastpath.snapshot(table, enabled=self.settings.fast_path, spared=self._spared, keyed=keyed)
        if self.providers is not None:  # the route to the provider clusters, before the picker's
            from shardwise.gateway.dataplane import providers as provider_routes

            snapshot = provider_routes.with_route(snapshot)
        return snapshot

    def _keys_changed(self) -> None:
        """A key created, changed or revoked: Envoy's table of fast keys follows (keys_lua.py)."""
        if self.dispatcher is not None and self.dispatcher.synced.is_set():
            self.discovery.update(self._snapshot(self.dispatcher.table))

    def _spare_overloaded(self) -> None:
        """After a scrape: the engines queueing far beyond their peers leave the fast path (overload.py)."""
        assert self.dispatcher is not None
        table = self.dispatcher.table
        spared = overload.spared(table, self.dispatcher.stats, self._spared)
        if spared != self._spared:
            log.info("fast path: engines spared for their queues: %s",
                     ", ".join(f"{endpoint} ({model})" for model, endpoint in sorted(spared)) or "none")
            self._spared = spared
            metrics.SPARED_ENGINES.set(len(spared))
            if self.dispatcher.synced.is_set():
                self.discovery.update(self._snapshot(table))

    def _synced(self) -> None:
        assert self.dispatcher is not None
        self.dispatcher.synced.set()
        metrics.SYNCED.set(1)
        self._rebuild()
        if self.keyring is not None:
            self.keyring.rebuild()
        log.info("caches synced: %d models", len(self.dispatcher.table.routes))

    # -- wake -------------------------------------------------------------------------------
    def _wake(self, route: routes.Route) -> None:
        asyncio.get_running_loop().create_task(self._write_wake(route))

    async def _write_wake(self, route: routes.Route) -> None:
        path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{route.namespace}/{api.PLURAL}/{route.name}"
        try:
            await asyncio.to_thread(self.kube.request, "PATCH", path, body=wake_patch(datetime.datetime.now()),
                                    content_type="application/merge-patch+json", timeout=10.0)
        except Exception as exc:  # noqa: BLE001 - the next tick tries again
            self._wake_log.failure(exc)
            return
        self._wake_log.success()
        metrics.WAKES.labels(route.model).inc()
        log.info("wake requested for %s (%s/%s): %d held", route.model, route.namespace, route.name,
                 self.dispatcher.holds.count(route.model) if self.dispatcher else 0)

    # -- loops ------------------------------------------------------------------------------
    async def _tick(self) -> None:
        assert self.dispatcher is not None
        while True:
            self.dispatcher.tick()
            await asyncio.sleep(self.settings.tick_s)

    async def _scrape(self) -> None:
        """Each routed engine's queue and KV-cache use, for the picker (absent: outstanding only)."""
        assert self.dispatcher is not None
        timeout = aiohttp.ClientTimeout(total=max(0.5, self.settings.scrape_interval_s / 2))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            reader = enginestats.EngineStatsReader(session)
            while True:
                # prefill engines too: a pair's prefill leg goes to the least loaded (service/prefill.py)
                endpoints = sorted({e for r in self.dispatcher.table.models() for e in (*r.endpoints, *r.prefill_endpoints)})
                reader.retain(set(endpoints))
                found = await asyncio.gather(*(self._scrape_one(reader, e) for e in endpoints))
                self.dispatcher.stats = {e: s for e, s in zip(endpoints, found) if s is not None}
                self._spare_overloaded()
                await asyncio.sleep(self.settings.scrape_interval_s)

    async def _scrape_one(self, reader: enginestats.EngineStatsReader, endpoint: str) -> picker.EngineStats | None:
        try:
            stats = await reader.read(endpoint)
        except Exception as exc:  # noqa: BLE001 - an engine that does not answer weighs by outstanding only
            self._scrape_log.failure(exc)
            return None
        self._scrape_log.success()
        return stats

    def _http_app(self) -> web.Application:
        live = health.liveness(self.contact, 300.0, lambda: self.threads)
        ready = health.readiness(lambda: bool(self.dispatcher and self.dispatcher.synced.is_set()
                                              and not self.dispatcher.closing), lambda: "leader")

        def probe(check: health.Check):
            async def handler(_: web.Request) -> web.Response:
                problem = check()
                return web.Response(status=200 if problem is None else 503, text=(problem or "ok") + "\n")
            return handler

        app = web.Application()
        app.router.add_get("/healthz", probe(live))
        app.router.add_get("/readyz", probe(ready))
        app.router.add_get("/metrics", _scrape_handler(WithoutKeys(metrics.REGISTRY)))
        consoleweb.add_routes(app, self)
        return app

    def _metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", _scrape_handler(metrics.REGISTRY))
        return app

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.dispatcher = Dispatcher(self.settings.limits, wake_interval_s=self.settings.wake_interval_s,
                                     on_wake=self._wake)
        for thread in self.threads:
            thread.start()
        watched = self.infds + self.pods + (self.keyring.informers if self.keyring else []) + \
            (self.provider_watch.informers if self.provider_watch else [])
        if self.provider_watch is not None:
            self.provider_watch.attach(self._loop)
        threading.Thread(target=lambda: wait_for_sync(watched,
                                                              self.stop)
                         and self._loop.call_soon_threadsafe(self._synced), name="sync", daemon=True).start()
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        pb_grpc.add_ExternalProcessorServicer_to_server(
            extproc.ExtProc(self.dispatcher, self.gatekeeper, self.providers,
                            prefill.PrefillLegs(min_prompt_tokens=self.settings.pd_min_prompt_tokens),
                            on_answered=event_hooks.answered_hook(self.export, self.events)), server)
        if self.providers is not None:  # the provider clusters, over CDS on a stream of their own
            from envoy.service.cluster.v3 import cds_pb2_grpc

            cds_pb2_grpc.add_ClusterDiscoveryServiceServicer_to_server(self.providers.cds, server)
        # The observe filter's access log (the same port, the same Envoy cluster): one entry per request.
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLog(Observer(self.gatekeeper, event_hooks.observe_hook(self.export, self.events))), server)
        # And Envoy's routes and fast-path endpoints, over ADS.
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(self.discovery, server)
        server.add_insecure_port(f"{self.settings.grpc_host}:{self.settings.grpc_port}")
        runner = web.AppRunner(self._http_app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.http_host, self.settings.http_port).start()
        metrics_runner = web.AppRunner(self._metrics_app(), access_log=None)
        await metrics_runner.setup()
        await web.TCPSite(metrics_runner, self.settings.metrics_host, self.settings.metrics_port).start()
        await server.start()
        log.info("gateway: ext_proc on %s:%d, console and probes on %s:%d, every metric on %s:%d",
                 self.settings.grpc_host, self.settings.grpc_port, self.settings.http_host, self.settings.http_port,
                 self.settings.metrics_host, self.settings.metrics_port)
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, stopping.set)
        tasks = [asyncio.create_task(self._tick()), asyncio.create_task(self._scrape())]
        if self.provider_watch is not None:
            tasks.append(asyncio.create_task(self.provider_watch.run()))
        if self.export is not None:
            tasks += self.export.tasks()
        if self.events is not None:
            tasks += self.events.tasks()
        if self.keyring is not None and self.gatekeeper is not None:
            self.keyring.attach(self._loop)
            tasks += [asyncio.create_task(self.gatekeeper.watch_store()),
                      asyncio.create_task(self.keyring.write_statuses())]
        try:
            await stopping.wait()
        finally:
            log.info("stopping: answering held requests")
            self.dispatcher.shutdown()
            await asyncio.sleep(0)  # let the held streams send their 503s
            await server.stop(grace=5.0)
            for task in tasks:
                task.cancel()
            if self.export is not None:  # the records of the last requests, bounded
                await self.export.drain()
            if self.events is not None:
                await self.events.drain()
            self.stop.set()
            await runner.cleanup()
            await metrics_runner.cleanup()


def _scrape_handler(registry: Any) -> Any:
    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=prometheus_client.generate_latest(registry),
                            headers={"content-type": prometheus_client.CONTENT_TYPE_LATEST})
    return scrape
