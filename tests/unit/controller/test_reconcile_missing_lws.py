"""Reconcile on a cluster without the LeaderWorkerSet CRD: a clear condition, no crash, no churn.

The shared integration cluster has the CRD installed (and removing it mid-session would break
other tests), so this scenario runs here against an in-memory API that answers 404 to a
LeaderWorkerSet apply exactly as the API server does for an unknown kind.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from shardwise.controller import reconcile
from shardwise.controller.settings import Settings
from shardwise.decide import missing_api
from shardwise.kube.client import ApiException

NODES = Path(__file__).parents[2] / "fixtures" / "nodes" / "h100-nvswitch-2x8.yaml"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
Key = tuple[str, str, str, str]


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386, as the API server applies a status merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    """The calls reconcile makes, over a dict; LeaderWorkerSet applies 404 until installed."""

    def __init__(self, infd: dict[str, Any], *, lws_installed: bool, lws_known: bool = True) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.lws_installed = lws_installed
        # Whether the informers know (they list the kind: a 404 there says it is not served);
        # False plays caches that still believe it is, so only the apply's 404 tells.
        self.lws_known = lws_known
        self.status_patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.nodes = yaml.safe_load(NODES.read_text())["items"]
        meta = infd["metadata"]
        self.infd_key = (infd["apiVersion"], infd["kind"], meta["namespace"], meta["name"])
        self.objects[self.infd_key] = infd

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        if obj["kind"] == "LeaderWorkerSet" and not self.lws_installed:
            raise ApiException(status=404, reason="Not Found")
        meta = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def installed(self, api_version: str, kind: str, namespace: str) -> bool:
        return self.lws_installed or kind != "LeaderWorkerSet" or not self.lws_known

    def list_nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.nodes)

    def list_gpu_pods(self) -> list[dict[str, Any]]:
        return []

    def pricing_table(self, namespace: str, configmap: str) -> dict[str, float]:
        return {}

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def get_cached(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(api_version, kind, namespace, name)

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        self.status_patches.append(status_patch)
        merge_patch(self.objects[self.infd_key].setdefault("status", {}), status_patch)
        return self.objects[self.infd_key]

    def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.objects[self.infd_key]["status"]
        return result

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.status()["conditions"] if c["type"] == type_)


def inference_deployment() -> dict[str, Any]:
    return {
        "apiVersion": "shardwise.io/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "llama-405b", "namespace": "ml", "uid": "u-405", "generation": 1},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "dtype": "bfloat16"},
            "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
            "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"], "tolerations": [KWOK_TOLERATION]},
        },
    }


def at(monkeypatch: pytest.MonkeyPatch, time: str) -> None:
    monkeypatch.setattr(reconcile, "now_rfc3339", lambda: time)


def run(kube: FakeKube) -> reconcile.Outcome:
    return reconcile.reconcile(kube, Settings(), "ml", "llama-405b")  # type: ignore[arg-type]


def test_missing_crd_is_a_degraded_condition_and_the_rest_is_still_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=False)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    outcome = run(kube)

    assert outcome.applied == ("Service/llama-405b",)
    service = kube.get("v1", "Service", "ml", "llama-405b")
    assert service is not None
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    status = kube.status()
    assert (status["plan"]["tensorParallel"], status["plan"]["pipelineParallel"],
            status["plan"]["nodesPerReplica"]) == (8, 2, 2)
    assert status["phase"] == "Degraded"
    assert status["endpoint"] == "http://llama-405b.ml.svc:8000/v1"
    assert (status["replicas"], status["readyReplicas"]) == (0, 0)
    degraded = kube.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "LeaderWorkerSetNotInstalled")
    assert "install LeaderWorkerSet" in degraded["message"]
    for type_ in ("Ready", "Progressing"):
        assert (kube.condition(type_)["status"], kube.condition(type_)["reason"]) == (
            "False", missing_api.REASON)
    stalled = kube.condition("Stalled")  # kstatus readers (Flux, kubectl wait) see it stuck
    assert (stalled["status"], stalled["reason"]) == ("True", missing_api.REASON)
    assert kube.condition("Reconciling")["status"] == "False"
    assert kube.condition("Planned")["status"] == "True"


def test_a_still_missing_crd_writes_nothing_on_the_next_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=False)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    run(kube)
    at(monkeypatch, "2026-01-01T00:05:00Z")
    outcome = run(kube)
    assert outcome.status_written is False
    assert kube.condition("Degraded")["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_installing_the_crd_later_converges_without_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=False)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    run(kube)
    kube.lws_installed = True
    at(monkeypatch, "2026-01-01T00:05:00Z")
    outcome = run(kube)
    assert outcome.applied == ("LeaderWorkerSet/llama-405b-lws",)
    degraded = kube.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "AsExpected")
    assert degraded["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert kube.status()["phase"] == "Progressing"
    assert kube.condition("Progressing")["status"] == "True"
    assert kube.condition("Stalled")["status"] == "False"


def test_a_crd_the_caches_still_believe_in_is_told_by_the_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=False, lws_known=False)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    outcome = run(kube)
    assert outcome.applied == ("Service/llama-405b",)
    assert kube.condition("Degraded")["reason"] == missing_api.REASON
    assert outcome.failure is None


def test_other_api_errors_are_not_mistaken_for_a_missing_crd(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)
    real_apply = kube.apply

    def forbidden(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if obj["kind"] == "LeaderWorkerSet":
            raise ApiException(status=403, reason="Forbidden")
        return real_apply(obj, **kwargs)

    monkeypatch.setattr(kube, "apply", forbidden)
    at(monkeypatch, "2026-01-01T00:00:00Z")
    outcome = run(kube)
    assert outcome.failure is not None and outcome.failure.reason == "Forbidden"
    assert kube.condition("Degraded")["reason"] == "Forbidden"


def test_an_unavailable_api_still_fails_the_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube(inference_deployment(), lws_installed=True)

    def unavailable(obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        raise ApiException(status=503, reason="Service Unavailable")

    monkeypatch.setattr(kube, "apply", unavailable)
    with pytest.raises(ApiException):
        run(kube)
