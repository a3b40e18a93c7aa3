"""One writer: leader election on a coordination.k8s.io/v1 Lease, client-go's algorithm.

Why our own rather than `kubernetes.leaderelection`: that one's `run()` returns for good once
leadership is lost (the process must exit to campaign again), it needs the typed client and a
global configuration, and it has no way to hand the lease over on shutdown. Kopf's peering is a
priority scheme, not a lease. This is client-go's logic in ~150 lines:

- every `retry_period` a candidate reads the Lease; it takes it when it is free or when the
  holder's record has not changed for `lease_duration` as measured on *our* clock from when we
  last saw it change (no trust in other machines' clocks);
- the leader renews every `retry_period`; if it has not renewed for `renew_deadline`
  (< lease_duration) it stops acting before anyone else may start, and campaigns again;
- on shutdown the leader releases the Lease (holder cleared), so a standby takes over at once.
Every update carries the Lease's resourceVersion: two candidates cannot both win one round.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from shardwise.kube.client import ApiException, Kube
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, *, identity: str | None = None,
                 timing: Timing = Timing(), clock: Callable[[], float] = time.monotonic,
                 on_contact: Callable[[bool], None] | None = None,
                 on_started: Callable[[], None] | None = None) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity = identity or default_identity()
        self.timing = timing
        self._clock = clock
        self._on_contact = on_contact or (lambda ok: None)
        self._on_started = on_started or (lambda: None)
        self.is_leader = threading.Event()
        self.transitions = 0  # times this process became leader
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime, transitions) last seen
        self._held: dict[str, Any] | None = None  # the Lease as our last write left it
        self._observed_at = 0.0
        self._renewed_at = float("-inf")
        self.last_contact = float("-inf")
        self._quiet = QuietLog(log, f"leader election (Lease {namespace}/{name})")

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace)}/leases/{quote(self.name)}"

    def acting(self) -> bool:
        """May this process write now? Only while it leads and renewed within the renew deadline,
        so it stops before the Lease can expire and a standby start."""
        return self.is_leader.is_set() and self._clock() - self._renewed_at < self.timing.renew_deadline

    def state(self) -> str:
        """leader, standby (in touch with the Lease), or unknown (not heard from it lately)."""
        if self.is_leader.is_set():
            return "leader"
        if self._clock() - self.last_contact <= self.timing.lease_duration:
            return "standby"
        return "unknown"

    # -- one round ---------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One round of the algorithm; True when we hold the Lease afterwards."""
        if self.is_leader.is_set() and self._held is not None and self._renew_optimistically():
            return True
        self._held = None
        now = self._clock()
        try:
            lease = self.kube.request("GET", self.path, timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = None
        self._contact()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(transitions=0, acquired=True)}
            try:
                self._held = self.kube.request("POST", self.path.rsplit("/", 1)[0], body=body, timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 409:  # someone else created it first
                    return False
                raise
            self._contact()
            return True

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        mine = holder == self.identity
        if holder and not mine and now < self._observed_at + duration:
            return False  # held by someone alive
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        new_spec = {**spec, **self._spec(transitions=transitions, acquired=not mine)}
        if mine:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["acquireTime"]
        lease["spec"] = new_spec
        try:  # carries resourceVersion: one winner
            self._held = self.kube.request("PUT", self.path, body=lease, timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._contact()
        return True

    def _renew_optimistically(self) -> bool:
        """client-go's fast path: the leader renews the Lease as its last write left it, without
        reading it first (one request a retry period, not two). A 409 means someone wrote it
        since: the full round reads it and decides."""
        lease = self._held
        assert lease is not None
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return False
        renewed = {**lease, "spec": {**spec, "renewTime": micro_time(),
                                     "leaseDurationSeconds": int(self.timing.lease_duration)}}
        try:
            self._held = self.kube.request("PUT", self.path, body=renewed, timeout=self._timeout)
        except ApiException:
            return False
        self._contact()
        return True

    @property
    def _timeout(self) -> float:
        """A round must not outlast the renew deadline: a hung request would keep us acting."""
        return max(1.0, self.timing.renew_deadline / 3)

    def _spec(self, *, transitions: int, acquired: bool) -> dict[str, Any]:
        stamp = micro_time()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.timing.lease_duration),
                "renewTime": stamp, "leaseTransitions": transitions}
        if acquired:
            spec["acquireTime"] = stamp
        return spec

    def _contact(self) -> None:
        self.last_contact = self._clock()
        self._on_contact(True)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = self._clock()
            self.step()
            stop.wait(max(0.0, self.timing.retry_period - (self._clock() - started)))
        self.release()

    def step(self) -> None:
        """One retry period's work: acquire or renew, and give up acting when renewals fail."""
        try:
            held = self.try_acquire_or_renew()
            self._quiet.success()
        except Exception as exc:  # noqa: BLE001 - API away: keep trying, say so boundedly
            self._on_contact(False)
            self._quiet.failure(exc)
            held = False
        now = self._clock()
        if held:
            self._renewed_at = now
            if not self.is_leader.is_set():
                self.transitions += 1
                log.info("became leader (Lease %s/%s, identity %s)", self.namespace, self.name, self.identity)
                self.is_leader.set()
                self._on_started()
        elif self.is_leader.is_set() and now - self._renewed_at >= self.timing.renew_deadline:
            log.warning("could not renew the Lease for %.0f s: no longer leader, standing by",
                        now - self._renewed_at)
            self.is_leader.clear()

    def release(self) -> None:
        """Give the Lease up (shutdown), so a standby need not wait for it to expire."""
        if not self.is_leader.is_set():
            return
        self.is_leader.clear()
        try:
            lease = self.kube.request("GET", self.path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": micro_time()}
            self.kube.request("PUT", self.path, body=lease)
            log.info("released the Lease %s/%s", self.namespace, self.name)
        except Exception as exc:  # noqa: BLE001 - it expires on its own
            log.warning("could not release the Lease: %s", exc)
