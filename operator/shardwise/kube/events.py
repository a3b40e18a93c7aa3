"""Kubernetes Events: built as plain data, posted from a thread of their own (client-go's broadcaster)."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from shardwise.kube.client import ApiException
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)


def build_event(involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str,
                reporter: str) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object with apiVersion, kind and metadata)."""
    meta = involved["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"], "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"],
                           "resourceVersion": meta.get("resourceVersion")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": reporter},
        "reportingComponent": reporter,
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
