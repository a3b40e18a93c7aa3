"""Apply failures and foreign objects end on the status with their reason, one Warning each, no retry storm."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shardwise.controller import reconcile
from shardwise.kube.client import ApiException
from tests.unit.controller.test_reconcile_missing_lws import FakeKube, at, inference_deployment, run


def refusing(status: int, message: str):
    def apply(obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        exc = ApiException(status=status, reason="refused")
        exc.body = json.dumps({"kind": "Status", "message": message})
        raise exc
    return apply


def warnings(kube: FakeKube) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in kube.events if e["type"] == "Warning"]


@pytest.mark.parametrize("status,message,reason", [
    (422, 'LeaderWorkerSet.leaderworkerset.x-k8s.io "llama-405b" is invalid: spec.leaderWorkerTemplate: Invalid value',
     "ChildRejected"),
    (403, 'leaderworkersets "llama-405b" is forbidden: exceeded quota: gpus, requested: pods=2', "QuotaExceeded"),
    (403, 'leaderworkersets "llama-405b" is forbidden: User "op" cannot patch', "Forbidden"),
])
def test_a_refused_apply_is_on_the_status_with_the_servers_message(monkeypatch, status, message, reason) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)
    monkeypatch.setattr(kube, "apply", refusing(status, message))
    at(monkeypatch, "2026-01-01T00:00:00Z")
    outcome = run(kube)
    assert outcome.failure is not None and outcome.failure.reason == reason
    for type_, want in (("Ready", "False"), ("Degraded", "True"), ("Progressing", "False"), ("Stalled", "True")):
        cond = kube.condition(type_)
        assert (cond["status"], cond["reason"]) == (want, reason), type_
    assert message in kube.condition("Degraded")["message"]
    assert [r for r, _ in warnings(kube)] == [reason]

    at(monkeypatch, "2026-01-01T00:00:30Z")  # a resync: same failure, nothing new written or announced
    patches = len(kube.status_patches)
    run(kube)
    assert len(kube.status_patches) == patches and [r for r, _ in warnings(kube)] == [reason]


def test_a_service_we_do_not_control_is_never_touched(monkeypatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)
    user_service = {"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "llama-405b", "namespace": "ml", "uid": "user-svc"},
                    "spec": {"selector": {"app": "mine"}, "ports": [{"port": 80}]}}
    kube.objects[("v1", "Service", "ml", "llama-405b")] = dict(user_service)
    applied: list[str] = []
    monkeypatch.setattr(kube, "apply", lambda obj, **_: applied.append(obj["kind"]))
    outcome = run(kube)
    assert applied == [] and outcome.applied == ()
    assert kube.objects[("v1", "Service", "ml", "llama-405b")] == user_service
    degraded = kube.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildConflict")
    assert "Service ml/llama-405b already exists and has no controller" in degraded["message"]
    assert [r for r, _ in warnings(kube)] == ["ChildConflict"]


def test_an_object_controlled_by_someone_else_is_named(monkeypatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)
    kube.objects[("v1", "Service", "ml", "llama-405b")] = {
        "apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "llama-405b", "namespace": "ml", "uid": "s",
            "ownerReferences": [{"kind": "InferenceDeployment", "name": "other", "uid": "u-other", "controller": True}]}}
    run(kube)
    assert "is controlled by InferenceDeployment other" in kube.condition("Degraded")["message"]


def test_a_create_is_not_forced_and_an_update_of_our_own_child_is(monkeypatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)
    forced: list[tuple[str, bool]] = []
    original = kube.apply

    def record(obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        forced.append((obj["kind"], force))
        return original(obj)

    monkeypatch.setattr(kube, "apply", record)
    run(kube)
    assert forced == [("LeaderWorkerSet", False), ("Service", False)]
    svc = kube.objects[("v1", "Service", "ml", "llama-405b")]
    svc["spec"]["ports"][0]["port"] = 9999  # someone edited our Service
    forced.clear()
    run(kube)
    assert forced == [("Service", True)]


def test_reconcile_outcome_has_no_failure_when_all_is_well(monkeypatch) -> None:
    assert run(FakeKube(inference_deployment(), lws_installed=True)).failure is None
    assert reconcile.Outcome((), False).failure is None
