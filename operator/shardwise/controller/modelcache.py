"""The model cache shell: read what the cache's state depends on (the gather step of reconcile),
and, as a loop, refresh downloads under way and remove caches nobody uses after the grace period.
Every decision is in decide/modelcache.py, decide/cachestate.py and render/modelcache.py.

Progress reaches the operator the way engine metrics do: it GETs `/progress` on the downloader
pod's IP. The downloader then needs no Kubernetes credentials at all (its pod mounts no service
account token), and only the operator writes objects. The final outcome travels in the pod's
termination message, so it survives the pod's exit; once verified it is stamped on the claim's
annotations, which are the cache's durable record (commit, bytes) for every deployment using it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pydantic

from shardwise.api import v1alpha1 as api
from shardwise.controller.cluster import Cluster
from shardwise.controller.settings import Settings
from shardwise.decide import adaptercache, adapters, cachestate
from shardwise.decide import modelcache as cache_decision
from shardwise.kube.client import collection_path
from shardwise.kube.quietlog import QuietLog
from shardwise.render import modelcache as mc

log = logging.getLogger(__name__)
def resolve(settings: Settings, spec: api.InferenceDeploymentSpec) -> mc.CacheRef:
    return mc.resolve(spec, default_mode=settings.model_cache_mode,
                      default_storage_class=settings.model_cache_storage_class,
                      default_endpoint=settings.hub_endpoint)


def _scrape(pod: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    ip = (pod.get("status") or {}).get("podIP")
    if not ip or (pod.get("status") or {}).get("phase") != "Running":
        return None
    try:
        with urllib.request.urlopen(f"http://{ip}:{mc.PROGRESS_PORT}/progress", timeout=timeout) as response:
            value = json.loads(response.read())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("bytesTotal") else None


def gather(kube: Cluster, settings: Settings, namespace: str,
           spec: api.InferenceDeploymentSpec) -> cache_decision.CacheInputs:
    """What the cache this spec uses depends on. The Job, its pods and the claim's events are read
    live (the informers keep slim serving pods, and the outcome is in the downloader pod's
    termination message), and only while a download is on its way."""
    ref = resolve(settings, spec)
    if ref.mode == "None":
        return cache_decision.CacheInputs(ref)
    claim = kube.get("v1", "PersistentVolumeClaim", namespace, ref.claim or "")
    if ref.mode == "PVC":
        return cache_decision.CacheInputs(ref, claim=claim)
    storage_class_found = None
    if ref.storage_class and claim is None:
        storage_class_found = kube.get_cluster_scoped(
            f"/apis/storage.k8s.io/v1/storageclasses/{quote(ref.storage_class)}") is not None
    inputs = cache_decision.CacheInputs(ref, claim=claim, storage_class_found=storage_class_found,
                                        **_adapter_reads(kube, namespace, spec, ref, claim,
                                                        settings.scrape_timeout_seconds))
    if not cache_decision.needs_download_reads(inputs):
        return inputs
    assert claim is not None
    job = kube.get_live("batch/v1", "Job", namespace, ref.job or "")
    pods = kube.list(collection_path("v1", "Pod", namespace), labelSelector=f"{mc.CACHE_LABEL}={ref.key}")
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    scraped = next((s for s in (_scrape(p, settings.scrape_timeout_seconds) for p in running) if s), None)
    events: list[dict[str, Any]] = []
    if (claim.get("status") or {}).get("phase") != "Bound":
        events = kube.list(collection_path("v1", "Event", namespace),
                           fieldSelector=f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={ref.claim}")
    return dataclasses.replace(inputs, job=job, pods=tuple(pods), claim_events=tuple(events), scraped=scraped)


# -- the loop: progress refresh and unused-cache removal ---------------------------------------
def _adapter_reads(kube: Cluster, namespace: str, spec: api.InferenceDeploymentSpec, ref: mc.CacheRef,
                   claim: dict[str, Any] | None, scrape_timeout: float) -> dict[str, Any]:
    """The Jobs and pods of the adapters still downloading (live, as the model's own)."""
    reads = [s for s in adaptercache.sources(spec) if adaptercache.needs_job_reads(s, ref, claim)]
    pods = {s.key: tuple(kube.list(collection_path("v1", "Pod", namespace),
                                   labelSelector=f"{adaptercache.JOB_LABEL}={s.key}")) for s in reads}
    progress = {key: found for key, running in pods.items()
                if (found := next((p for p in (_scrape(pod, scrape_timeout) for pod in running) if p), None))}
    return {
        "adapter_jobs": {s.key: kube.get_live("batch/v1", "Job", namespace, adaptercache.job_name(ref.claim or "", s))
                         for s in reads},
        "adapter_pods": pods,
        "adapter_progress": progress,
    }


def _claims_in_use(settings: Settings, items: list[dict[str, Any]]) -> set[tuple[str, str]]:
    used = set()
    for item in items:
        if item["metadata"].get("deletionTimestamp"):
            continue
        try:
            spec = api.InferenceDeploymentSpec.model_validate(item.get("spec") or {})
        except pydantic.ValidationError:
            continue
        ref = resolve(settings, spec)
        if ref.mode == "Cluster" and ref.claim:
            used.add((item["metadata"]["namespace"], ref.claim))
    return used


def collect_unused(kube: Cluster, settings: Settings, items: list[dict[str, Any]], now: datetime.datetime,
                   watched: Callable[[str], bool] = lambda _: True) -> list[str]:
    """Mark, unmark or delete cache claims by whether any InferenceDeployment still uses them.

    Only in namespaces this operator watches: elsewhere it cannot see the users of a claim."""
    used = _claims_in_use(settings, items)
    done = []
    for claim in kube.list_cache_claims(mc.CACHE_LABEL):
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") or not watched(meta["namespace"]):
            continue
        key = (meta["namespace"], meta["name"])
        decision = cachestate.unused_decision(claim, key in used, now=now,
                                              grace_s=settings.model_cache_grace_seconds)
        typed = {**claim, "apiVersion": "v1", "kind": "PersistentVolumeClaim"}
        if decision == "mark":
            stamp = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
            kube.patch_metadata(typed, {"annotations": {mc.UNUSED_SINCE_ANNOTATION: stamp}})
        elif decision == "unmark":
            kube.patch_metadata(typed, {"annotations": {mc.UNUSED_SINCE_ANNOTATION: None}})
        elif decision == "delete":
            # The Job first: its finished pod still counts as a user of the claim, whose
            # protection finalizer would hold the claim (and so the owned Job) forever.
            job = kube.get_live("batch/v1", "Job", meta["namespace"], f"{meta['name']}-download")
            if job is not None:
                kube.delete_owned(job)
            kube.delete_owned(typed)
            log.info("%s/%s: removed model cache unused for %.0f s", *key, settings.model_cache_grace_seconds)
        if decision != "keep":
            done.append(f"{decision} {key[0]}/{key[1]}")
    return done


def needs_refresh(item: dict[str, Any]) -> bool:
    """Deployments whose cache is on its way: reconciled every poll so progress stays current."""
    status = item.get("status") or {}
    phase = (status.get("modelCache") or {}).get("phase")
    return phase in ("Pending", "Downloading") or any(
        isinstance(a, dict) and a.get("reason") == adapters.DOWNLOADING for a in status.get("adapters") or ())


async def run_forever(kube: Cluster, settings: Settings, request: Callable[[str, str], None],
                      acting: Callable[[], bool], watched: Callable[[str], bool]) -> None:
    """Every poll, as leader: enqueue deployments whose cache is on its way (their progress is
    scraped by reconcile), and collect unused caches."""
    # Collection lists claims cluster-wide: every 30 s at most, often enough for a grace period.
    collect_every = min(30.0, max(settings.model_cache_poll_seconds, settings.model_cache_grace_seconds / 4))
    last_collect = 0.0
    quiet = QuietLog(log, "model cache loop")  # an API outage: one warning, not one per poll
    while True:
        await asyncio.sleep(settings.model_cache_poll_seconds)
        if not acting():
            continue
        now = asyncio.get_running_loop().time()
        collect, last_collect = (True, now) if now - last_collect >= collect_every else (False, last_collect)
        try:
            await asyncio.to_thread(_tick, kube, settings, request, collect, watched)
            quiet.success()
        except Exception as exc:  # noqa: BLE001 - the next poll retries
            log.debug("model cache loop failed", exc_info=exc)
            quiet.failure(exc)


def _tick(kube: Cluster, settings: Settings, request: Callable[[str, str], None], collect: bool,
          watched: Callable[[str], bool]) -> None:
    items = kube.list_inference_deployments()  # from the informer: no request
    for item in items:
        if needs_refresh(item):
            request(item["metadata"]["namespace"], item["metadata"]["name"])
    if collect:
        collect_unused(kube, settings, items, datetime.datetime.now(datetime.UTC), watched)
