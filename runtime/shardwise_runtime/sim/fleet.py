"""The fleet manager: one simulated engine per serving pod, kept in step with the API server.

In the local control plane KWOK runs no containers, so nothing listens on a pod's IP. This shell
watches the pods, asks the pure `pods` module which engines should exist, and starts or stops
aiohttp sites to match, all in one event loop: an idle engine costs a socket and a few objects,
not a process, so hundreds fit on two CPU cores.

The watch runs in a daemon thread with the synchronous Kubernetes client and hands every event
to the loop. It is level-triggered: each (re)list replaces the whole picture, and it relists
after every watch timeout, error or expired resource version, so a missed event heals itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from kubernetes import client, config, watch

from shardwise_runtime.sim import app, pods
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 60
MAX_BACKOFF_S = 30.0
# A deleted pod's connections just drop, as they would with the real container killed; waiting
# for its streams to finish would stall every other engine's start and stop.
SHUTDOWN_TIMEOUT_S = 0.5

PodEvent = tuple[str, Any]  # ("SYNC", [pod, ...]) or ("ADDED"|"MODIFIED"|"DELETED", pod)


class Fleet:
    """The engines this process serves, keyed by pod."""

    def __init__(self) -> None:
        self._engines: dict[str, tuple[EngineConfig, web.AppRunner]] = {}

    @property
    def running(self) -> dict[str, EngineConfig]:
        """Pod key -> config of every engine currently listening."""
        return {key: engine_config for key, (engine_config, _) in self._engines.items()}

    async def apply(self, desired: Mapping[str, EngineConfig]) -> None:
        """Stop and start engines until the running set matches `desired`."""
        changes = pods.plan_fleet(self.running, desired)
        await asyncio.gather(*(self._stop(key) for key in changes.stop))
        await asyncio.gather(*(self._start(key, desired[key]) for key in changes.start))

    async def _stop(self, key: str) -> None:
        engine_config, runner = self._engines.pop(key)
        await runner.cleanup()
        log.info("stopped engine for %s on %s:%d", key, engine_config.host, engine_config.port)

    async def _start(self, key: str, engine_config: EngineConfig) -> None:
        try:
            runner, _ = await app.start_site(
                Engine(engine_config), shutdown_timeout_s=SHUTDOWN_TIMEOUT_S
            )
        except OSError as error:
            # Another process holds the address; the next event or resync tries again.
            log.warning(
                "cannot serve %s on %s:%d: %s", key, engine_config.host, engine_config.port, error
            )
            return
        self._engines[key] = (engine_config, runner)
        log.info(
            "started engine for %s on %s:%d serving %s",
            key,
            engine_config.host,
            engine_config.port,
            ",".join(engine_config.served_model_names),
        )

    async def close(self) -> None:
        """Stop every engine."""
        await self.apply({})


def _list_and_watch(
    api: client.CoreV1Api, namespace: str, emit: Callable[[PodEvent], None]
) -> None:
    """Blocking: list, then watch until a timeout or error, forever; errors back off."""
    serialize = api.api_client.sanitize_for_serialization
    kwargs: dict[str, Any] = {"label_selector": pods.INFERENCE_LABEL}
    if namespace == "all":
        list_pods: Callable[..., Any] = api.list_pod_for_all_namespaces
    else:
        list_pods = api.list_namespaced_pod
        kwargs["namespace"] = namespace
    backoff = 1.0
    while True:
        try:
            listing = list_pods(**kwargs)
            emit(("SYNC", [serialize(pod) for pod in listing.items]))
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                list_pods,
                resource_version=listing.metadata.resource_version,
                timeout_seconds=WATCH_TIMEOUT_S,
                **kwargs,
            )
            for event in stream:
                if event["type"] == "ERROR":
                    break  # typically 410 Gone: relist
                emit((event["type"], serialize(event["object"])))
            backoff = 1.0
        except Exception as error:  # noqa: BLE001 - the watch must survive anything the API does
            log.warning("pod watch failed, relisting in %.0fs: %s", backoff, error)
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def apply_event(known: dict[str, dict[str, Any]], event: PodEvent) -> None:
    """Fold one watch event into the pods known by key."""
    kind, payload = event
    if kind == "SYNC":
        known.clear()
        known.update({pods.pod_key(pod): pod for pod in payload})
    elif kind == "DELETED":
        known.pop(pods.pod_key(payload), None)
    else:
        known[pods.pod_key(payload)] = payload


def desired_engines(known: Mapping[str, Mapping[str, Any]]) -> dict[str, EngineConfig]:
    """Pod key -> engine config for every known pod that should have an engine."""
    configs = {key: pods.engine_config_from_pod(pod) for key, pod in known.items()}
    return {key: engine_config for key, engine_config in configs.items() if engine_config}


async def run_fleet(kubeconfig: str, namespace: str) -> None:
    """Serve an engine for every serving pod until cancelled."""
    kube = config.new_client_from_config(kubeconfig)  # type: ignore[no-untyped-call]
    api = client.CoreV1Api(kube)
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[PodEvent] = asyncio.Queue()
    threading.Thread(
        target=_list_and_watch,
        name="pod-watch",
        daemon=True,
        args=(api, namespace, lambda e: loop.call_soon_threadsafe(events.put_nowait, e)),
    ).start()
    fleet = Fleet()
    known: dict[str, dict[str, Any]] = {}
    try:
        while True:
            apply_event(known, await events.get())
            while not events.empty():  # fold a burst of events into one apply
                apply_event(known, events.get_nowait())
            await fleet.apply(desired_engines(known))
    finally:
        await fleet.close()
