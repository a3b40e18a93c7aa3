"""LoRA adapters on the running engines: the shell around decide/adapters.py.

Every interval the leader asks each ready serving replica of each deployment with adapters (or
with adapters still loaded) which adapters its engine serves (GET /v1/models), loads what the spec
adds and unloads what it removed (POST /v1/load_lora_adapter, /v1/unload_lora_adapter), and
writes on the pod what the engine now serves and what it refused. No pod restarts, no rollout:
the adapter list is not in the pod template. Reconcile turns the annotations into status.adapters
and the AdaptersReady condition (one writer of the status); the gateway routes each adapter name
to the replicas that serve it.

The engine's answer is the truth, read every interval: a restarted engine (its adapters gone)
gets them loaded again; a new replica gets the current set as soon as it is ready. A refused
load is recorded and not asked again for the same path until `RETRY_S` has passed (the engine
would refuse it again). Deployments and pods come from the informers' caches: no API read per
cycle, and a pod is patched only when what it records changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pydantic

from shardwise.api import v1alpha1 as api
from shardwise.controller import loops, modelcache
from shardwise.controller.cluster import Cluster
from shardwise.controller.settings import Settings
from shardwise.decide import adapters as decide
from shardwise.decide.live_status import scrape_targets
from shardwise.kube.client import ApiException
from shardwise.kube.quietlog import QuietLog
from shardwise.render import labels, vllm_args

log = logging.getLogger(__name__)

RETRY_S = 300.0


class AdapterSync:
    def __init__(self, kube: Cluster, settings: Settings, acting: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.settings = settings
        self._acting = acting
        self._clock = clock
        self._quiet = QuietLog(log, "adapter sync")
        self._refused_at: dict[tuple[str, str, str], float] = {}  # (pod uid, adapter, path) -> when

    async def run_forever(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.adapter_timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await loops.every(self.settings.adapter_interval_seconds, lambda: self.cycle(session),
                              acting=self._acting, quiet=self._quiet, clock=self._clock)

    async def cycle(self, session: aiohttp.ClientSession) -> None:
        items = await asyncio.to_thread(self.kube.list_inference_deployments)
        results = await asyncio.gather(*(self._sync_deployment(i, session) for i in items), return_exceptions=True)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(items)} deployments: {type(failed[0]).__name__}: {failed[0]}")

    async def _sync_deployment(self, item: dict[str, Any], session: aiohttp.ClientSession) -> None:
        meta = item["metadata"]
        try:
            spec = api.InferenceDeploymentSpec.model_validate(item.get("spec") or {})
        except pydantic.ValidationError:
            return  # reconcile reports it; adapters already loaded stay until the spec is valid
        ref = modelcache.resolve(self.settings, spec)
        claim = None
        if ref.mode == "Cluster" and any(a.source.repo for a in spec.adapters):  # from the informer's cache
            claim = await asyncio.to_thread(self.kube.get, "v1", "PersistentVolumeClaim", meta["namespace"],
                                            ref.claim or "")
        wanted = decide.wanted_paths(spec, ref, claim)
        pods = await asyncio.to_thread(self.kube.list_pods, meta["namespace"], labels.selector_string(meta["name"]))
        by_name = {p["metadata"]["name"]: p for p in pods}
        targets = scrape_targets(pods)
        if not wanted and not any(decide.loaded_on(by_name[n]) or decide.failures_on(by_name[n]) for n in targets):
            return
        await asyncio.gather(*(self._sync_pod(by_name[name], ip, wanted, session) for name, ip in targets.items()))

    async def _sync_pod(self, pod: dict[str, Any], ip: str, wanted: dict[str, str],
                        session: aiohttp.ClientSession) -> None:
        base = f"http://{ip}:{vllm_args.VLLM_PORT}"
        uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
        async with session.get(f"{base}/v1/models") as response:
            response.raise_for_status()
            served = decide.served_adapters(await response.json(content_type=None))
        recorded = decide.failures_on(pod)
        now = self._clock()
        retry = frozenset(name for name, f in recorded.items()
                          if now - self._refused_at.get((uid, name, f.path), float("-inf")) >= RETRY_S)
        actions = decide.sync_actions(wanted, served, recorded, retry)
        failed = {name: f for name, f in recorded.items() if name in wanted and wanted[name] == f.path}
        for name in actions.unload:
            async with session.post(f"{base}/v1/unload_lora_adapter", json={"lora_name": name}) as response:
                if response.status < 300 or response.status == 404:  # 404: gone already
                    served.pop(name, None)
        for name, path in actions.load:
            async with session.post(f"{base}/v1/load_lora_adapter",
                                    json={"lora_name": name, "lora_path": path}) as response:
                failure = decide.classify_refusal(response.status, await response.text(), path)
            if failure is None:
                served[name] = path
                failed.pop(name, None)
            else:
                failed[name] = failure
                self._refused_at[(uid, name, path)] = now
                log.info("%s/%s: adapter %s refused: %s", pod["metadata"]["namespace"], pod["metadata"]["name"],
                         name, failure.message)
        await asyncio.to_thread(self._record, pod, served, failed)

    def _record(self, pod: dict[str, Any], served: dict[str, str], failed: dict[str, decide.Failure]) -> None:
        wanted = decide.annotations(served, failed)
        have = pod["metadata"].get("annotations") or {}
        if all(have.get(k) == v for k, v in wanted.items()) or not self._acting():
            return
        meta = pod["metadata"]
        target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": meta["namespace"], "name": meta["name"]}}
        try:
            self.kube.patch_metadata(target, {"annotations": wanted})
        except ApiException as exc:
            if exc.status != 404:  # the pod went: nothing to record
                raise
