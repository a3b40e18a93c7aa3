"""Kubernetes Events for what a person wants to know happened: a new plan, a failure, readiness."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from shardwise import conditions
from shardwise.api import v1alpha1 as api
from shardwise.controller.kube import ApiException, Kube
from shardwise.controller.quietlog import QuietLog

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


class EventSink:
    """Posts events from a thread of its own, as client-go's event broadcaster does.

    A reconcile hands its events over and goes on: on a busy API server two event POSTs were a
    third of a new resource's sequential requests. Bounded: when the API server cannot keep up,
    events beyond `capacity` are dropped (and counted in the log), never the reconciles.
    """

    def __init__(self, post: Callable[[dict[str, Any]], None], capacity: int = 1000) -> None:
        self._post = post
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(capacity)
        self._quiet = QuietLog(log, "posting events")
        self.dropped = 0

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning("event queue full: %d events dropped so far (latest %s)", self.dropped, event.get("reason"))

    def run(self, stop: threading.Event, drain_s: float = 2.0) -> None:
        """Post until stopped, then what is left for up to `drain_s` (a shutdown keeps its events)."""
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if deadline is None and stop.is_set():
                deadline = time.monotonic() + drain_s
            try:
                event = self._queue.get(timeout=0.2)
            except queue.Empty:
                if deadline is not None:
                    return
                continue
            self._post_with_retries(event, stop)

    def _post_with_retries(self, event: dict[str, Any], stop: threading.Event, attempts: int = 5) -> None:
        for attempt in range(attempts):
            try:
                self._post(event)
                self._quiet.success()
                return
            except ApiException as exc:
                if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                    # Refused (RBAC, a namespace being deleted): informative only, not retried.
                    log.warning("could not post event %s: %s", event.get("reason"), exc.reason)
                    return
                self._quiet.failure(exc)
            except Exception as exc:  # noqa: BLE001 - the API server is unreachable: logged boundedly
                self._quiet.failure(exc)
            if stop.wait(min(5.0, 0.5 * 2 ** attempt)):
                return

    def pending(self) -> int:
        return self._queue.qsize()


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
