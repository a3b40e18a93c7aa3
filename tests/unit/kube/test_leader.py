"""Leader election against an in-memory Lease API with resourceVersion conflicts, on a fake clock."""

import copy
from typing import Any

from shardwise.kube.client import ApiException
from shardwise.kube.leader import LeaderElector, Timing


class LeaseApi:
    def __init__(self) -> None:
        self.lease: dict | None = None
        self.rv = 0
        self.down = False
        self.calls: list[str] = []

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.calls.append(method)
        if self.down:
            raise ApiException(status=0, reason="connection refused")
        if method == "GET":
            if self.lease is None:
                raise ApiException(status=404, reason="Not Found")
            return copy.deepcopy(self.lease)
        if method == "POST":
            if self.lease is not None:
                raise ApiException(status=409, reason="AlreadyExists")
        elif method == "PUT":
            if body["metadata"].get("resourceVersion") != str(self.rv):
                raise ApiException(status=409, reason="Conflict")
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


TIMING = Timing(lease_duration=15, renew_deadline=10, retry_period=2)


def elector(api: LeaseApi, clock: Clock, name: str) -> LeaderElector:
    return LeaderElector(api, "ns", "lease", identity=name, timing=TIMING, clock=clock)  # type: ignore[arg-type]


def round_(e: LeaderElector, clock: Clock) -> None:
    e.step()


def test_one_leader_standby_waits_for_the_lease_to_expire_then_takes_over() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    for _ in range(20):  # a keeps renewing: b never gets it
        clock.now += 2
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    # a dies; b must wait a whole lease duration from when it last saw a change
    clock.now += 2
    assert not b.try_acquire_or_renew()
    clock.now += 12
    assert not b.try_acquire_or_renew()  # 14 s of silence: still a's
    clock.now += 2
    assert b.try_acquire_or_renew()
    assert api.lease["spec"]["holderIdentity"] == "b" and api.lease["spec"]["leaseTransitions"] == 1
    clock.now += 2
    assert not a.try_acquire_or_renew()  # a, back, does not take it from a live holder


def test_a_leader_that_cannot_renew_stops_acting_before_the_lease_can_expire() -> None:
    api, clock = LeaseApi(), Clock()
    a = elector(api, clock, "a")
    round_(a, clock)
    assert a.acting() and a.state() == "leader"
    api.down = True
    clock.now += 9
    assert a.acting()  # within the renew deadline
    clock.now += 1.5
    assert not a.acting()  # past it: stop writing, even before the loop notices
    round_(a, clock)
    assert not a.is_leader.is_set()
    clock.now += 10
    assert a.state() == "unknown"
    api.down = False
    round_(a, clock)  # the API is back and the Lease is still ours: lead again, no restart
    assert a.acting() and a.transitions == 2


def test_release_hands_the_lease_over_at_once() -> None:
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    round_(a, clock)
    assert not b.try_acquire_or_renew()
    a.release()
    assert api.lease["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_the_leader_renews_with_one_request_and_reads_again_after_a_conflict() -> None:
    api, clock = LeaseApi(), Clock()
    a = elector(api, clock, "a")
    round_(a, clock)
    api.calls.clear()
    for _ in range(5):
        clock.now += 2
        round_(a, clock)
    assert api.calls == ["PUT"] * 5 and a.acting()
    # Someone else wrote the Lease (b took it over when it looked expired to b): the optimistic
    # renewal conflicts, the full round reads it and stands down.
    lease = copy.deepcopy(api.lease)
    lease["spec"]["holderIdentity"] = "b"
    api.request("PUT", "", body=lease)
    api.calls.clear()
    clock.now += 2
    assert a.try_acquire_or_renew() is False
    assert api.calls == ["PUT", "GET"]
