"""What one reconcile does about the model cache, from what the shell gathered: pure.

The shell reads the claim (informer), whether its storage class exists, and, only while a
download is on its way, the downloader Job, its pods, the claim's events and the progress the
running downloader answered (`CacheInputs`). From those, `decide` says how far along the cache
is (cachestate.view) and what to write: the claim when missing, the downloader Job once the
claim exists (it is owned by the claim, so it needs the claim's uid: the next pass, requeued at
once), the verified outcome stamped on the claim, a failed Job replaced when what it depended on
(a token, the hub) changed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from shardwise.decide import cachestate
from shardwise.render import modelcache as mc

INPUTS_ANNOTATION = "shardwise.io/downloader-inputs"


@dataclasses.dataclass(frozen=True)
class CacheInputs:
    """What the shell read about one deployment's cache."""

    ref: mc.CacheRef
    claim: dict[str, Any] | None = None
    storage_class_found: bool | None = None
    job: dict[str, Any] | None = None
    pods: tuple[dict[str, Any], ...] = ()
    claim_events: tuple[dict[str, Any], ...] = ()
    scraped: dict[str, Any] | None = None
    # LoRA adapters' downloads, by adaptercache.Source.key: read only while one is on its way.
    adapter_jobs: Mapping[str, dict[str, Any] | None] = dataclasses.field(default_factory=dict)
    adapter_pods: Mapping[str, tuple[dict[str, Any], ...]] = dataclasses.field(default_factory=dict)
    adapter_progress: Mapping[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # scraped /progress


@dataclasses.dataclass(frozen=True)
class CacheDecision:
    view: cachestate.CacheView
    apply: tuple[dict[str, Any], ...] = ()  # the claim or the Job, created (never forced)
    record: tuple[dict[str, Any], dict[str, Any]] | None = None  # (claim, annotations) once verified
    delete: tuple[dict[str, Any], ...] = ()  # a failed Job whose inputs changed
    requeue: bool = False  # the claim was just created: the Job follows on the next pass


def downloader_inputs(job: dict[str, Any]) -> str:
    """What a failed Job would need to differ in for a new attempt to make sense (token, hub)."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    return json.dumps([container.get("image"), container.get("env")], sort_keys=True)


def needs_download_reads(inputs: CacheInputs) -> bool:
    """Must the shell read the Job, pods and events? Only while the cache is on its way."""
    if inputs.ref.mode != "Cluster":
        return False
    early = cachestate.view(inputs.ref, claim=inputs.claim, storage_class_found=inputs.storage_class_found,
                            claim_events=[], job=None, pods=[], scraped=None)
    return early.phase not in ("Ready", "Failed") and inputs.claim is not None


def decide(inputs: CacheInputs, plan: dict[str, Any], *, namespace: str, downloader_image: str,
           token_secret: tuple[str, str] | None) -> CacheDecision:
    ref = inputs.ref
    if ref.mode != "Cluster":
        return CacheDecision(cachestate.view(ref, claim=inputs.claim, storage_class_found=None, claim_events=[],
                                             job=None, pods=[], scraped=None))
    early = cachestate.view(ref, claim=inputs.claim, storage_class_found=inputs.storage_class_found,
                            claim_events=[], job=None, pods=[], scraped=None)
    if early.phase in ("Ready", "Failed"):
        return CacheDecision(early)
    if inputs.claim is None:
        claim = mc.build_claim(ref, namespace, mc.weight_bytes(plan))
        # Seen as the API server will answer it: there, not bound yet.
        view = cachestate.view(ref, claim=claim, storage_class_found=inputs.storage_class_found, claim_events=[],
                               job=None, pods=[], scraped=None)
        return CacheDecision(view, apply=(claim,), requeue=True)
    desired_job = mc.build_job(ref, namespace, inputs.claim["metadata"]["uid"], image=downloader_image,
                               token_secret=token_secret)
    desired_job["metadata"]["annotations"][INPUTS_ANNOTATION] = downloader_inputs(desired_job)
    job = inputs.job
    create = ()
    if job is None:
        job, create = desired_job, (desired_job,)
    view = cachestate.view(ref, claim=inputs.claim, storage_class_found=inputs.storage_class_found,
                           claim_events=list(inputs.claim_events), job=job, pods=list(inputs.pods),
                           scraped=inputs.scraped)
    if view.phase == "Ready":
        annotations = {mc.PHASE_ANNOTATION: "Ready", mc.COMMIT_ANNOTATION: view.commit or "",
                       mc.BYTES_ANNOTATION: str((view.progress or {}).get("bytesTotal", 0))}
        claim = {**inputs.claim, "apiVersion": "v1", "kind": "PersistentVolumeClaim"}
        return CacheDecision(view, apply=create, record=(claim, {"annotations": annotations}))
    if view.phase == "Failed" and not create and \
            (job["metadata"].get("annotations") or {}).get(INPUTS_ANNOTATION) != downloader_inputs(desired_job):
        # The spec changed what the download depends on (a token was added): try again.
        retry = cachestate.CacheView("Downloading", "DownloaderStarting", f"retrying the download of {ref.model}")
        # No requeue: the Job takes a moment to go; the model cache loop comes back every poll.
        return CacheDecision(retry, delete=({**job, "apiVersion": "batch/v1", "kind": "Job"},))
    return CacheDecision(view, apply=create)
