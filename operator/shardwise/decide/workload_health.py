"""Why a workload does not serve, read from its conditions and its pods' container states.

Pure functions over the objects the API server returns. Each answer is one `Failure` (a reason a
person can search for and the controller's or kubelet's own words), or None when nothing is wrong
beyond "still starting". Reasons are stable across resyncs: the kubelet alternates ErrImagePull
and ImagePullBackOff, and a crash-looping container is briefly Running between back-offs; both
read as one reason, so the Degraded condition (and its one Warning event) does not flap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# A container restarted this often without becoming ready is crash-looping even in the seconds
# between back-offs when the kubelet shows it Running.
CRASH_LOOP_RESTARTS = 3

# Most specific first: when several pods fail differently, the first reason here is reported.
SEVERITY = ("OOMKilled", "CrashLoopBackOff", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
            "CreateContainerError", "RunContainerError")
_WAITING = {"ImagePullBackOff": "ImagePullBackOff", "ErrImagePull": "ImagePullBackOff",
            "InvalidImageName": "InvalidImageName", "CrashLoopBackOff": "CrashLoopBackOff",
            "CreateContainerConfigError": "CreateContainerConfigError",
            "CreateContainerError": "CreateContainerError", "RunContainerError": "RunContainerError"}


# The ResourceQuota admission plugin's two refusals: over the limit, and a quota whose usage the
# quota controller has not computed yet (a quota created moments before the pods). Both refuse pods
# until the quota changes, and the ReplicaSet controller keeps the first message it saw.
_QUOTA_REFUSALS = ("exceeded quota", "status unknown for quota")


def is_quota_refusal(message: str) -> bool:
    return any(marker in message for marker in _QUOTA_REFUSALS)


@dataclass(frozen=True)
class Failure:
    reason: str
    message: str


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def workload_failure(workload: dict[str, Any] | None) -> Failure | None:
    """ReplicaFailure=True (quota, admission) or Progressing=False/ProgressDeadlineExceeded."""
    if workload is None:
        return None
    kind, name = workload.get("kind", "Deployment"), workload.get("metadata", {}).get("name", "")
    failure = _condition(workload, "ReplicaFailure")
    if failure is not None and failure.get("status") == "True":
        message = (failure.get("message") or "").strip()
        reason = "QuotaExceeded" if is_quota_refusal(message) else "ReplicaFailure"
        return Failure(reason, f"{kind} {name} cannot create pods: {message}")
    progressing = _condition(workload, "Progressing")
    if progressing is not None and progressing.get("status") == "False" \
            and progressing.get("reason") == "ProgressDeadlineExceeded":
        return Failure("ProgressDeadlineExceeded", f"{kind} {name}: {(progressing.get('message') or '').strip()}")
    return None


def _container_failure(status: dict[str, Any]) -> tuple[str, str] | None:
    state, last = status.get("state") or {}, status.get("lastState") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    last_terminated = last.get("terminated") or {}
    restarts = int(status.get("restartCount") or 0)
    if status.get("ready"):
        return None
    if "OOMKilled" in (terminated.get("reason"), last_terminated.get("reason")):
        return "OOMKilled", (f"OOMKilled (exit code {(terminated or last_terminated).get('exitCode', 137)}), "
                             f"{restarts} restarts: the container ran out of memory")
    reason = _WAITING.get(waiting.get("reason", ""))
    if reason is None and restarts >= CRASH_LOOP_RESTARTS and last_terminated:
        reason = "CrashLoopBackOff"
    if reason is None:
        return None
    detail = (waiting.get("message") or "").strip()
    if reason == "CrashLoopBackOff":
        exited = last_terminated.get("reason") or "Error"
        detail = f"{restarts} restarts, last exit {exited} (code {last_terminated.get('exitCode', '?')})"
        if last_terminated.get("message"):
            detail += f": {last_terminated['message'].strip()}"
    return reason, f"{reason}: {detail}" if detail else reason


def pod_failure(pods: Iterable[dict[str, Any]]) -> Failure | None:
    """The most severe container failure among the pods, naming the pod, the container and how many pods."""
    found: dict[str, list[str]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        pod_status = pod.get("status") or {}
        for status in (pod_status.get("initContainerStatuses") or []) + (pod_status.get("containerStatuses") or []):
            failure = _container_failure(status)
            if failure is not None:
                reason, detail = failure
                found.setdefault(reason, []).append(
                    f"pod {pod['metadata']['name']} container {status.get('name')}: {detail}")
    for reason in SEVERITY:
        if reason in found:
            first, more = found[reason][0], len(found[reason]) - 1
            return Failure(reason, first + (f" (and {more} more)" if more else ""))
    return None


def unschedulable(pods: Iterable[dict[str, Any]]) -> Failure | None:
    """PodScheduled=False/Unschedulable, with the scheduler's message."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        cond = _condition(pod, "PodScheduled")
        if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return Failure("Unschedulable",
                           f"pod {pod['metadata']['name']} cannot be scheduled: {(cond.get('message') or '').strip()}")
    return None
