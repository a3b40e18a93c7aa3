"""Reconcile (gather, decide, act) with spec.routing on a cluster without the InferencePool CRD.

The shared integration cluster has the Gateway API Inference Extension CRDs installed for
tests/e2e/test_inference_pool.py, and removing a CRD mid-session would break the other tests, so
the missing-CRD path runs here against the in-memory API of test_reconcile_missing_lws.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from shardwise.controller import reconcile
from shardwise.controller.settings import Settings
from shardwise.render import routing

from tests.unit.controller.test_reconcile_missing_lws import FakeKube, at


class RoutingKube(FakeKube):
    """LeaderWorkerSet served; the InferencePool API only once `pool_installed`."""

    def __init__(self, infd: dict[str, Any], *, pool_installed: bool) -> None:
        super().__init__(infd, lws_installed=True)
        self.pool_installed = pool_installed

    def installed(self, api_version: str, kind: str, namespace: str) -> bool:
        return self.pool_installed or kind != routing.POOL_KIND


def small() -> dict[str, Any]:
    return {
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": "qwen", "namespace": "ml", "uid": "u-q", "generation": 1},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "serving": {"maxModelLen": 2048},
                 "placement": {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                                                "effect": "NoSchedule"}]},
                 "routing": {"inferencePool": {"endpointPicker": {"name": "epp"}}}},
    }


def run(kube: FakeKube) -> reconcile.Outcome:
    return reconcile.reconcile(kube, Settings(), "ml", "qwen")  # type: ignore[arg-type]


def test_missing_pool_crd_creates_no_pool_and_installing_it_later_does(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = RoutingKube(small(), pool_installed=False)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    outcome = run(kube)
    assert "InferencePool/qwen" not in outcome.applied and "Deployment/qwen" in outcome.applied
    assert kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, "ml", "qwen") is None
    routed = kube.condition("Routed")
    assert (routed["status"], routed["reason"]) == ("False", "InferencePoolNotInstalled")
    assert "kubectl apply" in routed["message"]
    assert any(e["reason"] == "InferencePoolNotInstalled" for e in kube.events)

    at(monkeypatch, "2026-01-01T00:05:00Z")
    assert run(kube).status_written is False  # still missing: nothing new to say

    kube.pool_installed = True
    at(monkeypatch, "2026-01-01T00:10:00Z")
    outcome = run(kube)
    assert outcome.applied == ("InferencePool/qwen", "ConfigMap/qwen-bbr-models")
    pool = kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, "ml", "qwen")
    assert pool is not None and pool["spec"]["endpointPickerRef"]["name"] == "epp"
    assert kube.condition("Routed")["reason"] == "NoParents"
