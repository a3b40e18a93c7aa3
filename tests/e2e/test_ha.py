"""One writer: two operator processes elect one leader on a Lease, write what one would, and the
standby takes over when the leader is killed. Both run exactly as in a pod (POD_NAME identity)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, writes_by
from tests.e2e.test_lifecycle import ready, small_model

pytestmark = pytest.mark.e2e

LEASE = 6.0  # short, so the test is: lease 6 s, renew deadline 4 s, retry 1 s
ELECTION = ("--lease-duration-seconds", str(LEASE), "--renew-deadline-seconds", "4", "--retry-period-seconds", "1")


def workload(kubectl: Kubectl) -> int:
    """The same script for one and for two operators: create, edit, settle. Returns the writes."""
    for i in range(3):
        kubectl.apply_yaml(small_model(f"ha-{i}", placement={}))
    for i in range(3):
        eventually(lambda i=i: ready(kubectl, f"ha-{i}"), timeout=120, what=f"ha-{i} Ready")
    for i in range(3):
        kubectl.run("patch", "infd", f"ha-{i}", "--type=merge", "-p", '{"spec":{"serving":{"maxConcurrency":4}}}')
    for i in range(3):
        eventually(lambda i=i: (o := ready(kubectl, f"ha-{i}")) and o["metadata"]["generation"] == 2,
                   timeout=120, what=f"ha-{i} Ready after the edit")
    return len(eventually(lambda: _stable(kubectl), timeout=90, what="writes to settle"))


def _stable(kubectl: Kubectl) -> list:
    first = writes_by(kubectl.cluster, OPERATOR_USER, kubectl.namespace)
    time.sleep(8.0)  # four metrics periods of the test operators
    second = writes_by(kubectl.cluster, OPERATOR_USER, kubectl.namespace)
    return second if len(first) == len(second) and second else []


@pytest.fixture
def second_namespace(cluster: LocalCluster) -> Iterator[Kubectl]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield Kubectl(cluster, name)
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


class LeaderWatch:
    """Polls both operators' `shardwise_leader` gauge; records any moment both lead."""

    def __init__(self, operators: list[OperatorProcess]) -> None:
        self.operators, self.both, self.samples = operators, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            leading = [o.metrics().get("shardwise_leader") == 1 for o in self.operators]
            self.samples += 1
            self.both += all(leading)

    def __enter__(self) -> "LeaderWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_two_operators_write_what_one_does_with_one_leader_and_hand_over_on_kill(
        cluster: LocalCluster, without_session_operator: None, kubectl: Kubectl, second_namespace: Kubectl) -> None:
    a = OperatorProcess(cluster, extra_args=ELECTION, name="operator-a").start()
    b = None
    try:
        eventually(lambda: a.settled(min_reconciles=0), timeout=60, what="operator-a leading")
        one = workload(kubectl)

        b = OperatorProcess(cluster, extra_args=ELECTION, name="operator-b").start()
        eventually(lambda: b.probe("/readyz")[0] == 200, timeout=60, what="operator-b ready as a standby")
        with LeaderWatch([a, b]) as watch:
            two = workload(second_namespace)
        assert watch.samples > 20 and watch.both == 0, f"both led in {watch.both} of {watch.samples} samples"
        assert one > 0 and two <= one * 1.1 + 1, f"one operator wrote {one} times, two wrote {two}"
        assert b.metrics().get("shardwise_leader") == 0  # the standby stood by

        a.kill()
        killed = time.monotonic()
        eventually(lambda: b.metrics().get("shardwise_leader") == 1, timeout=3 * LEASE, what="operator-b to lead")
        took = time.monotonic() - killed
        # The standby waits out the lease from when it last saw it renewed (up to one retry
        # period before the kill), then takes it on its next round.
        assert took <= LEASE + 2 * 1.0 + 2.0, f"handover took {took:.1f} s"
        second_namespace.run("patch", "infd", "ha-0", "--type=merge", "-p",
                             '{"spec":{"serving":{"maxConcurrency":2}}}')
        eventually(lambda: (o := ready(second_namespace, "ha-0")) and o["metadata"]["generation"] == 3,
                   timeout=120, what="the new leader to carry an edit through")
        assert b.process.alive()
    finally:
        a.stop()
        if b is not None:
            b.stop()
