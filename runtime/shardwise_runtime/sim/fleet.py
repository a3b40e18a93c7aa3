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
import os
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from kubernetes import client, config, watch

from shardwise_runtime.sim import app, loopback, pods, real, real_runner
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
        except (OSError, ValueError) as error:
            # OSError: another process holds the address; the next event or resync tries again.
            # ValueError: a --lora-modules adapter vLLM would not start with (no files, rank).
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


def desired_engines(known: Mapping[str, Mapping[str, Any]],
                    folders: Mapping[tuple[str, str], str] | None = None) -> dict[str, EngineConfig]:
    """Pod key -> engine config for every known pod that should have a simulated engine.

    Pods that ask for the real engine (`real.wants_real_engine`) never get a simulated one.
    `folders`: (namespace, claim) -> the local folder of its PersistentVolume (`claim_folders`).
    """
    folders = folders or {}
    configs = {key: pods.engine_config_from_pod(pod, {path: folders[claim] for path, claim in
                                                      pods.claim_mounts(pod).items() if claim in folders})
               for key, pod in known.items() if not real.wants_real_engine(pod)}
    return {key: engine_config for key, engine_config in configs.items() if engine_config}


def claim_folders(api: client.CoreV1Api, known: Mapping[str, Mapping[str, Any]],
                  found: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """The local folder of each bound claim the pods mount (hostPath or local PVs, as the harness
    creates them), added to `found`: what a kubelet would mount. Blocking: run it in a thread."""
    for pod in known.values():
        for claim in pods.claim_mounts(pod).values():
            if claim in found:
                continue
            try:
                volume = api.read_namespaced_persistent_volume_claim(claim[1], claim[0]).spec.volume_name
                pv = api.read_persistent_volume(volume).spec if volume else None
            except client.ApiException:
                continue
            source = (pv.host_path or pv.local) if pv is not None else None
            if source is not None:
                found[claim] = source.path
    return found


def _group(pod: Mapping[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    key = labels.get(pods.GROUP_KEY_LABEL)
    return f"{(pod.get('metadata') or {}).get('namespace', '')}/{key}" if key else None


def desired_real_engines(known: Mapping[str, Mapping[str, Any]], install: real.Install, *,
                         base_env: Mapping[str, str], cpus: int,
                         master_port: Callable[[str], int]) -> dict[str, real.RealLaunch]:
    """Pod key -> real-engine process for every running pod that asks for one.

    Pods of one multi-node group (the LWS group-key label) share the leader's pod IP and one
    `master_port(group)`; a pod being deleted gets none (its process is stopped).
    """
    leaders = {_group(pod): (pod.get("status") or {}).get("podIP") for pod in known.values()
               if _group(pod) and ((pod.get("metadata") or {}).get("labels") or {}).get(
                   pods.WORKER_INDEX_LABEL) == "0"}
    out = {}
    for key, pod in known.items():
        if not real.wants_real_engine(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        group = _group(pod)
        launch = real.real_launch(pod, install, base_env=base_env, cpus=cpus,
                                  master_port=master_port(group) if group else None,
                                  leader_ip=leaders.get(group) if group else None)
        if launch is not None:
            out[key] = launch
    return out


def _pod_status_reporter(api: client.CoreV1Api, known: Mapping[str, Mapping[str, Any]]) -> real_runner.Report:
    """Writes a real-engine pod's readiness as the kubelet would (Ready, ContainersReady, restarts)."""

    async def report(key: str, ready: bool, restarts: int, reason: str) -> None:
        pod = known.get(key)
        if pod is None:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state = "True" if ready else "False"
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        body = {"status": {
            "conditions": [{"type": kind, "status": state, "reason": reason, "lastTransitionTime": now}
                           for kind in ("Ready", "ContainersReady")],
            "containerStatuses": [{"name": name, "ready": ready, "restartCount": restarts,
                                   "started": True, "image": real.LOCAL_VLLM_CPU_IMAGE, "imageID": "",
                                   "state": {"running": {"startedAt": now}}} for name in names],
        }}
        namespace, name = key.split("/", 1)
        await asyncio.to_thread(api.patch_namespaced_pod_status, name, namespace, body)

    return report


def _real_install(home: pathlib.Path | None) -> real.Install | None:
    if home is None:
        return None
    launcher = pathlib.Path(sys.executable).parent / "shardwise-launch"
    return real.Install(home=home, launcher=str(launcher))


async def run_fleet(kubeconfig: str, namespace: str, *, real_home: pathlib.Path | None = None,
                    log_dir: pathlib.Path | None = None) -> None:
    """Serve an engine for every serving pod until cancelled.

    Pods that ask for the real engine get a real vLLM process from `real_home` (the folder
    hack/install-vllm.sh prints); its logs go to `log_dir`.
    """
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
    install = _real_install(real_home)
    engines = real_runner.RealEngines(log_dir or pathlib.Path("."), _pod_status_reporter(api, known))
    group_ports: dict[str, int] = {}
    warned: set[str] = set()
    folders: dict[tuple[str, str], str] = {}  # a bound claim's volume never moves

    def master_port(group: str) -> int:
        return group_ports.setdefault(group, loopback.free_port())

    try:
        while True:
            apply_event(known, await events.get())
            while not events.empty():  # fold a burst of events into one apply
                apply_event(known, events.get_nowait())
            await fleet.apply(desired_engines(known, await asyncio.to_thread(claim_folders, api, known, folders)))
            if install is not None:
                await engines.apply(desired_real_engines(
                    known, install, base_env=os.environ, cpus=os.cpu_count() or 1, master_port=master_port))
            else:
                for key in sorted(k for k, p in known.items() if real.wants_real_engine(p)):
                    if key not in warned:
                        warned.add(key)
                        log.warning("%s asks for the real engine, but the fleet has no --real-engine-home", key)
    finally:
        await engines.close()
        await fleet.close()
