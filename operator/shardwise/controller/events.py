"""Kubernetes Events for what a person wants to know happened: a new plan, a failure, readiness."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from shardwise import conditions
from shardwise.api import v1alpha1 as api
from shardwise.controller.kube import ApiException, Kube

log = logging.getLogger(__name__)
REPORTER = "shardwise-operator"


def build_event(infd: dict[str, Any], *, type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    meta = infd["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND, "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"],
                           "resourceVersion": meta.get("resourceVersion")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": REPORTER},
        "reportingComponent": REPORTER,
    }


def emit(kube: Kube, infd: dict[str, Any], *, type_: str, reason: str, message: str, now: str) -> None:
    try:
        kube.create_event(build_event(infd, type_=type_, reason=reason, message=message, now=now))
    except ApiException as exc:  # an event is informative; failing to post one must not fail a reconcile
        log.warning("could not post event %s: %s", reason, exc.reason)


def transitions(old_status: dict[str, Any], new_status: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of events for conditions that flipped, plans that changed and
    rollouts that started (with their strategy and why)."""
    out: list[tuple[str, str, str]] = []
    old_plan, new_plan = old_status.get("plan") or {}, new_status.get("plan") or {}
    if new_plan.get("feasible") and (old_plan.get("tensorParallel"), old_plan.get("pipelineParallel"),
                                     old_plan.get("gpuProduct")) != (new_plan.get("tensorParallel"),
                                                                     new_plan.get("pipelineParallel"),
                                                                     new_plan.get("gpuProduct")):
        out.append(("Normal", "Planned", f"TP {new_plan['tensorParallel']} x PP {new_plan['pipelineParallel']} on "
                                         f"{new_plan.get('gpuProduct')}: {new_plan.get('reason', '')}"))
    old_rollout, new_rollout = old_status.get("rollout") or {}, new_status.get("rollout") or {}
    if new_rollout.get("revision") and new_rollout.get("revision") != old_rollout.get("revision"):
        out.append(("Normal", "RolloutStarted", f"{new_rollout.get('strategy')}: {new_rollout.get('reason', '')}"))
    for cond in new_status.get("conditions") or []:
        before = conditions.find(old_status.get("conditions"), cond["type"])
        if before is not None and before.get("status") == cond["status"] and before.get("reason") == cond["reason"]:
            continue
        if cond["type"] == "Ready" and cond["status"] == "True":
            out.append(("Normal", "Ready", cond["message"] or "all replicas ready"))
        elif cond["type"] in ("Degraded", "ReplicasIgnored") and cond["status"] == "True":
            out.append(("Warning", cond["reason"], cond["message"]))
        elif cond["type"] == "Planned" and cond["status"] == "False":
            out.append(("Warning", cond["reason"], cond["message"]))
    # Planned=False and Degraded=True usually carry the same reason: one event per (type, reason).
    seen: set[tuple[str, str]] = set()
    return [e for e in out if (e[0], e[1]) not in seen and not seen.add((e[0], e[1]))]


def announce_transitions(kube: Kube, infd: dict[str, Any], old_status: dict[str, Any],
                         new_status: dict[str, Any], now: str) -> None:
    for type_, reason, message in transitions(old_status, new_status):
        emit(kube, infd, type_=type_, reason=reason, message=message, now=now)
