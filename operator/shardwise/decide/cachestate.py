"""What state a model cache is in, and what an InferenceDeployment's status says about it: pure.

Inputs are what the shell read (the claim, its events, the downloader Job and pods, the progress
the running downloader answered, whether the named storage class exists); the output is a
`CacheView` and, from it, `status.modelCache`, the ModelCached condition and the phase. The gate
is `view.ready`: no serving workload is rendered before it is True.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from shardwise import conditions
from shardwise.conditions import Condition
from shardwise.decide import progress
from shardwise.render import modelcache as mc


@dataclasses.dataclass(frozen=True)
class CacheView:
    phase: str  # Disabled | Pending | Downloading | Ready | Failed
    reason: str
    message: str = ""
    commit: str | None = None
    progress: dict[str, Any] | None = None

    @property
    def ready(self) -> bool:
        return self.phase in ("Ready", "Disabled")


def _job_condition(job: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in ((job or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == type_ and c.get("status") == "True"), None)


def job_has(job: dict[str, Any] | None, type_: str) -> bool:
    """Does the Job carry this condition, True?"""
    return _job_condition(job, type_) is not None


def termination_message(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The downloader's outcome, as Kubernetes copied it from its termination message file."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        text = terminated.get("message")
        if text:
            try:
                value = json.loads(text)
            except ValueError:
                return {"state": "Failed", "reason": "DownloadFailed", "message": text[:500]}
            return value if isinstance(value, dict) else None
    return None


def _newest(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)


def _claim_trouble(claim_events: list[dict[str, Any]]) -> tuple[str, str, str] | None:
    """(phase, reason, message) from the newest binding or provisioning event of a Pending claim."""
    for event in reversed(claim_events):
        reason, message = event.get("reason") or "", (event.get("message") or "").strip()
        if reason not in ("ProvisioningFailed", "FailedBinding"):
            continue
        lowered = message.lower()
        # Wordings of the in-tree binder and of CSI drivers (EBS: "Volume capabilities
        # MULTI_NODE_MULTI_WRITER not supported").
        if any(w in lowered for w in ("access mode", "accessmode", "volume capabilit", "multi_node")):
            return ("Failed", "AccessModeUnsupported",
                    f"the storage cannot provide the access mode the cache asks for: {message}")
        if "kubernetes.io/no-provisioner" in message:
            # Statically provisioned storage: an administrator creates the volume; not a failure.
            return ("Pending", "WaitingForVolume", "the storage class provisions nothing itself: waiting for an "
                                                   "administrator to create a matching PersistentVolume")
        if reason == "ProvisioningFailed":
            return "Failed", "ClaimProvisioningFailed", message
    return None


def view(ref: mc.CacheRef, *, claim: dict[str, Any] | None, storage_class_found: bool | None,
         claim_events: list[dict[str, Any]], job: dict[str, Any] | None, pods: list[dict[str, Any]],
         scraped: dict[str, Any] | None) -> CacheView:
    if ref.mode == "None":
        return CacheView("Disabled", "CacheDisabled", "serving pods fetch the weights from the hub")
    if ref.mode == "PVC":
        if claim is None:
            return CacheView("Failed", "ClaimNotFound", f"claim {ref.claim} (model.cache.claimName) does not exist")
        if (claim.get("status") or {}).get("phase") != "Bound":
            return CacheView("Pending", "ClaimNotBound", f"claim {ref.claim} is not bound yet")
        return CacheView("Ready", "PrefilledClaim", f"weights from claim {ref.claim} at /{ref.path}")
    if storage_class_found is False:
        return CacheView("Failed", "StorageClassNotFound",
                         f"storage class {ref.storage_class!r} (model.cache.storageClassName) does not exist; "
                         "name an existing one, or set model.cache.mode None")
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    if annotations.get(mc.PHASE_ANNOTATION) == "Ready":
        total = int(annotations.get(mc.BYTES_ANNOTATION) or 0)
        done = {"bytesDone": total, "bytesTotal": total, "percent": 100}
        return CacheView("Ready", "Cached", f"weights of {ref.model} at commit {annotations.get(mc.COMMIT_ANNOTATION)} "
                                            f"verified on claim {ref.claim}",
                         commit=annotations.get(mc.COMMIT_ANNOTATION), progress=done)
    if claim is None:
        return CacheView("Pending", "CreatingCache", f"creating cache claim {ref.claim}")
    trouble = _claim_trouble(claim_events)
    if (claim.get("status") or {}).get("phase") != "Bound" and trouble:
        return CacheView(*trouble)
    outcomes = [m for m in (termination_message(p) for p in _newest(pods)) if m]
    if _job_condition(job, "Complete") or _job_condition(job, "SuccessCriteriaMet"):
        done = next((m for m in outcomes if m.get("state") == "Complete"), None)
        if done is None or not done.get("verified"):
            return CacheView("Failed", "DownloadUnverified", "the downloader Job completed without reporting "
                             "verified weights")
        total = int(done.get("bytes") or 0)
        return CacheView("Ready", "Cached", f"{done.get('files')} files of {ref.model} at commit {done.get('commit')} "
                         f"verified on claim {ref.claim}", commit=done.get("commit"),
                         progress={"bytesDone": total, "bytesTotal": total, "percent": 100})
    failed = _job_condition(job, "Failed") or _job_condition(job, "FailureTarget")
    if failed:
        last = next((m for m in outcomes if m.get("state") == "Failed"), None)
        if last is not None:
            return CacheView("Failed", str(last.get("reason") or "DownloadFailed"), str(last.get("message") or ""),
                             commit=last.get("commit"))
        return CacheView("Failed", "DownloadFailed", f"downloader Job {ref.job} failed: {failed.get('message', '')}")
    if scraped:
        return CacheView("Downloading", "Downloading", summary(scraped, long=True), commit=scraped.get("commit"),
                         progress=_progress_fields(scraped))
    if claim.get("status", {}).get("phase") != "Bound":
        return CacheView("Pending", "ClaimNotBound", f"waiting for cache claim {ref.claim} to be bound")
    retries = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
    note = f" (attempt {retries + 1}; a retry resumes the files already on the volume)" if retries else ""
    return CacheView("Downloading", "DownloaderStarting", f"downloader Job {ref.job} starting{note}")


def _progress_fields(scraped: dict[str, Any]) -> dict[str, Any]:
    total, done = int(scraped.get("bytesTotal") or 0), int(scraped.get("bytesDone") or 0)
    out = {"bytesDone": done, "bytesTotal": total, "percent": int(100 * done / total) if total else 0,
           "bytesPerSecond": int(scraped.get("bytesPerSecond") or 0)}
    if scraped.get("etaSeconds") is not None:
        out["etaSeconds"] = int(scraped["etaSeconds"])
    return out


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds // 3600}h{round(seconds % 3600 / 60)}m"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def summary(scraped: dict[str, Any], *, long: bool = False) -> str:
    """`37% 4m left` for the printer column; the long form adds bytes and rate for the condition."""
    fields = _progress_fields(scraped)
    text = f"{fields['percent']}%"
    if fields.get("etaSeconds") is not None:
        text += f" {_duration(fields['etaSeconds'])} left"
    if long:
        text += (f" ({_bytes(fields['bytesDone'])} of {_bytes(fields['bytesTotal'])}, "
                 f"{_bytes(fields['bytesPerSecond'])}/s)")
    return text


def status_fields(ref: mc.CacheRef, cache: CacheView, *, expected_start_s: float) -> dict[str, Any]:
    """`status.modelCache`."""
    out: dict[str, Any] = {"mode": ref.mode, "phase": cache.phase, "reason": cache.reason,
                           "expectedStartSeconds": round(expected_start_s)}
    if ref.mode == "None":
        return out
    out.update(claim=ref.claim, path=ref.model_path, revision=ref.revision)
    if cache.commit:
        out["commit"] = cache.commit
    if cache.progress:
        out.update(cache.progress)
    if cache.phase == "Downloading" and cache.progress:
        out["summary"] = summary(cache.progress)
    elif cache.phase == "Downloading":
        out["summary"] = "starting"
    else:
        out["summary"] = {"Ready": "cached", "Failed": cache.reason, "Pending": "pending"}.get(cache.phase, "")
    return out


def gated_status(update: dict[str, Any], status: dict[str, Any], cache: CacheView, *,
                 generation: int | None, now: str) -> dict[str, Any]:
    """A status whose workload waits for the weights: phase and conditions say why."""
    failed = cache.phase == "Failed"
    updates = [Condition("Ready", False, cache.reason if failed else "WaitingForWeights", cache.message),
               Condition("Progressing", not failed, cache.reason, cache.message),
               Condition("Degraded", failed, cache.reason if failed else "AsExpected",
                         cache.message if failed else "")]
    updates += progress.kstatus_conditions(updates)
    merged = conditions.merge(update.get("conditions") or status.get("conditions") or [], updates,
                              generation=generation, now=now)
    return {**update, "phase": "Failed" if failed else ("Downloading" if cache.phase == "Downloading" else "Pending"),
            "conditions": merged}


def with_cache_condition(update: dict[str, Any], cache: CacheView, *, generation: int | None,
                         now: str) -> dict[str, Any]:
    if cache.phase == "Disabled":
        return update
    condition = Condition("ModelCached", cache.phase == "Ready", cache.reason, cache.message)
    merged = conditions.merge(update.get("conditions") or [], [condition], generation=generation, now=now)
    return {**update, "conditions": merged}


def unused_decision(claim: dict[str, Any], in_use: bool, *, now: datetime.datetime,
                    grace_s: float) -> str:
    """keep | mark | unmark | delete, for a cache claim: removed `grace_s` after its last user went."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    since = annotations.get(mc.UNUSED_SINCE_ANNOTATION)
    if in_use:
        return "unmark" if since else "keep"
    if annotations.get(mc.KEEP_ANNOTATION) == "true" or grace_s < 0:
        return "keep"
    if not since:
        return "mark"
    try:
        marked = datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return "mark"
    return "delete" if (now - marked).total_seconds() >= grace_s else "keep"


def cache_events(old_status: dict[str, Any], new_status: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message): a download started or the weights became ready. Failures already
    get a Warning from the Degraded condition."""
    old = (old_status.get("modelCache") or {}).get("phase")
    new_cache = new_status.get("modelCache") or {}
    new = new_cache.get("phase")
    if old == new:
        return []
    if new == "Downloading":
        return [("Normal", "DownloadStarted", f"downloading {new_cache.get('revision')} weights into claim "
                                              f"{new_cache.get('claim')}")]
    if new == "Ready" and new_cache.get("mode") == "Cluster":
        return [("Normal", "WeightsCached", f"weights at commit {new_cache.get('commit')} verified on claim "
                                            f"{new_cache.get('claim')}")]
    return []
