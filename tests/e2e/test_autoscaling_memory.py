"""The autoscaler remembers: an operator restart or a leader change partway through a scale-down
window neither scales down early nor waits the whole window again (docs/autoscaling.md, "What is
remembered where").

Load takes a deployment to two replicas and stops; the recommendation falls to one, and the
90 s scale-down window starts. About 40 s into it the operator is restarted (gracefully), or, in
the second test, the leader of two operators is killed and the standby takes over. The times are
the product's own: each run of decisions in the ConfigMap `shardwise-autoscaling` starts with the
time of its first evaluation, so the test reads when the recommendation fell and when the count
went down, and compares them with the window:

- no early scale-down: the count goes down no sooner than one window after the recommendation
  fell (less the gap one evaluation may leave), as it would have without the interruption;
- no repeated wait: it goes down within that window plus a generous slack, and before a whole
  window has passed since the new operator could first evaluate, which is the soonest an operator
  that forgot the window it waited could scale down.

A background thread polls the ConfigMap every second and keeps every run it sees, because the
stored form drops the records older than the window as it goes.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process
from shardwise_runtime.sim import load, targets

from tests.e2e.support import Kubectl, OperatorProcess, eventually
from tests.e2e.test_autoscaling import manifest, sim_fleet  # noqa: F401 - sim_fleet: the simulated engines, a fixture
from tests.e2e.test_ha import ELECTION, LEASE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "mistral-remember"
OPERATOR_NAMESPACE = "shardwise-system"  # the e2e operator's Settings().namespace
CONFIGMAP = "shardwise-autoscaling"
PERIOD_S = 3
WINDOW_S = 90
# Where in the window the operator goes away: far enough from both ends that a new operator that
# forgot the window could not scale down before a whole new window, even on a slow machine.
INTERRUPT_AT_S = 40
# How late after the window the scale-down may come on two busy cores (evaluation timer drift,
# a slow status write); well under the WINDOW_S - INTERRUPT_AT_S a repeated wait would add.
SLACK_S = 30
# At most this between two evaluations still counts as watched (decision._MAX_GAP_PERIODS).
GAP_S = 2.5 * PERIOD_S
RPS = 9.0  # one replica with 4 slots serves ~6/s of 32 tokens (test_autoscaling)

MANIFEST = manifest(NAME, max_replicas=2, period_s=PERIOD_S, window_s=WINDOW_S)

Run = tuple[float, int, int, Any, bool]  # (first evaluation at, recommendation, desired, pressure, starting)


class StoredRuns:
    """Every run of decisions the ConfigMap held for one deployment while this watched it."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self._cluster = cluster
        self._key = f"{namespace}.{NAME}"
        self._seen: set[Run] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stored-runs", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            result = self._cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "configmap", CONFIGMAP,
                                           "-o", "json", check=False)
            if result.returncode != 0:
                continue
            text = (json.loads(result.stdout).get("data") or {}).get(self._key)
            if not text:
                continue
            runs = {(float(at), int(rec), int(des), pressure, bool(starting))
                    for at, rec, des, pressure, starting in json.loads(text).get("runs") or ()}
            with self._lock:
                self._seen |= runs

    def timeline(self) -> list[Run]:
        """The runs in time order. As the window moves the oldest stored run starts later with the
        same values: adjacent runs with the same values are one, from its earliest start."""
        with self._lock:
            seen = sorted(self._seen)
        merged: list[Run] = []
        for run in seen:
            if merged and merged[-1][1:] == run[1:]:
                continue
            merged.append(run)
        return merged

    def __enter__(self) -> "StoredRuns":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def fell_at(runs: list[Run]) -> float | None:
    """When the recommendation fell below the two replicas running and stayed there (the start of
    the trailing stretch of lower recommendations at desired 2); None while it is not below."""
    start = None
    for at, rec, des, _, _ in runs:
        if des == 2 and rec < 2:
            start = at if start is None else start
        else:
            start = None
    return start


def scale_down(runs: list[Run]) -> tuple[float, float] | None:
    """(when the recommendation fell for good, when the count went from 2 to 1), from the runs;
    None before the count went down. The last such step: a fresh-clone run saw desired go 2, 1, 2
    within seven seconds during the scale-up (runs at +0.0 s: 3/2, +1.1 s: 1/1, +7.2 s: 6/2), and
    the first step down then read as the scale-down (reported in the stop's note)."""
    down = next((i for i in range(len(runs) - 1, 0, -1) if runs[i][2] < 2 and runs[i - 1][2] == 2), None)
    if down is None:
        return None
    fall = fell_at(runs[:down])
    return (runs[down][0] if fall is None else fall), runs[down][0]


def _state(kubectl: Kubectl) -> dict[str, Any]:
    infd = kubectl.get("infd", NAME)
    deployment = kubectl.get("deployment", NAME) or {}
    status = infd.get("status") or {}
    return {"desired": status.get("desiredReplicas"), "ready": status.get("readyReplicas"),
            "workload": (deployment.get("spec") or {}).get("replicas"),
            "autoscaling": status.get("autoscaling") or {}}


def _rfc3339(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def _two_replicas_then_idle(cluster: LocalCluster, kubectl: Kubectl) -> None:
    """Load until two replicas serve it, then none."""
    eventually(lambda: _state(kubectl)["ready"] == 1, timeout=90, what="one ready replica")
    follow = targets.follow_deployment(str(cluster.kubeconfig), kubectl.namespace, NAME, refresh_s=1.0)
    eventually(follow, timeout=30, what="the engine of the first replica")
    stop = threading.Event()

    def drive() -> None:
        while not stop.is_set():  # 5 s rounds, so stopping takes at most one round
            asyncio.run(load.run_load(follow, NAME, rps=RPS, duration_s=5, max_tokens=32,
                                      request_timeout_s=20))

    driver = threading.Thread(target=drive, name="load", daemon=True)
    driver.start()
    try:
        eventually(lambda: (s := _state(kubectl))["desired"] == 2 and s["workload"] == 2 and s["ready"] == 2,
                   timeout=300, what="a scale-up to two ready replicas")
    finally:
        stop.set()
        driver.join(30)
        follow.close()


def _remembered_across(cluster: LocalCluster, kubectl: Kubectl, interrupt: Callable[[], float],
                       what: str) -> None:
    """The scenario; `interrupt` takes the acting operator away and returns the earliest time
    the operator that acts next could evaluate."""
    cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    kubectl.apply_yaml(MANIFEST)
    with StoredRuns(cluster, kubectl.namespace) as stored:
        _two_replicas_then_idle(cluster, kubectl)
        fall = eventually(lambda: (f := fell_at(stored.timeline())) is not None
                          and time.time() >= f + INTERRUPT_AT_S and f,
                          timeout=120 + INTERRUPT_AT_S, what="the recommendation to fall, then 40 s")
        assert _state(kubectl)["desired"] == 2, f"scaled down {time.time() - fall:.0f} s into the window"
        after = interrupt()
        down_state = eventually(lambda: (s := _state(kubectl))["desired"] == 1 and s["workload"] == 1 and s,
                                timeout=WINDOW_S + 180, what=f"the scale-down after {what}")
        fell, down = eventually(lambda: (r := scale_down(stored.timeline())) is not None and r[1] > fall and r,
                                timeout=30, what="the scale-down in the ConfigMap")
    runs = stored.timeline()
    print(f"\n{what}: recommendation fell at {fall:.1f}, interrupted, next operator from {after:.1f}")
    for run in runs:
        print(f"  {run}")
    print(f"fell at {fell:.1f}, down at {down:.1f}: {down - fell:.1f} s (window {WINDOW_S} s), "
          f"{down - after:.1f} s after the next operator could evaluate")
    assert fell == fall and fell < after, "the recommendation fell again after the interruption"
    assert down > after, "scaled down before the interruption: nothing remembered was tested"
    assert down >= fell + WINDOW_S - GAP_S, f"early scale-down: {down - fell:.1f} s after the fall"
    assert down < after + WINDOW_S, (f"waited a whole window again: down {down - after:.1f} s after the "
                                     f"new operator could evaluate")
    assert down <= fell + WINDOW_S + SLACK_S, f"scale-down {down - fell:.1f} s after the recommendation fell"
    scaled_at = _rfc3339(down_state["autoscaling"]["lastScaleTime"])
    assert fell + WINDOW_S - GAP_S - 1 <= scaled_at < after + WINDOW_S, down_state
    events = [e for e in (kubectl.get("events") or {"items": []})["items"]
              if e.get("reason") == "ScaledDown" and e["involvedObject"]["name"] == NAME]
    assert len(events) == 1 and "replicas 2 -> 1" in events[0]["message"], events


def test_a_restart_in_the_scale_down_window_neither_scales_down_early_nor_waits_it_again(
        operator: OperatorProcess, cluster: LocalCluster, kubectl: Kubectl,
        sim_fleet: Process) -> None:  # noqa: F811
    def restart() -> float:
        operator.stop()
        started = time.time()
        operator.start()
        return started

    _remembered_across(cluster, kubectl, restart, "an operator restart")
    assert operator.process.alive()


def test_a_new_leader_in_the_scale_down_window_neither_scales_down_early_nor_waits_it_again(
        cluster: LocalCluster, without_session_operator: None, kubectl: Kubectl,
        sim_fleet: Process) -> None:  # noqa: F811
    a = OperatorProcess(cluster, extra_args=ELECTION, name="operator-a").start()
    b = OperatorProcess(cluster, extra_args=ELECTION, name="operator-b")
    try:
        eventually(lambda: a.settled(min_reconciles=0), timeout=60, what="operator-a leading")
        b.start()
        eventually(lambda: b.probe("/readyz")[0] == 200, timeout=60, what="operator-b ready as a standby")

        def kill_leader() -> float:
            assert a.metrics().get("shardwise_leader") == 1 and b.metrics().get("shardwise_leader") == 0
            a.kill()
            killed = time.time()
            eventually(lambda: b.metrics().get("shardwise_leader") == 1, timeout=3 * LEASE + 10,
                       what="operator-b to lead")
            return killed

        _remembered_across(cluster, kubectl, kill_leader, "a leader change")
        assert b.process.alive() and b.metrics().get("shardwise_leader") == 1
    finally:
        a.stop()
        b.stop()
