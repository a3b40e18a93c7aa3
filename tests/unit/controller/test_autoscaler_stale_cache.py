"""The autoscaler's shell against a cache that lags: a decision is remembered only once written.

The operator reads InferenceDeployments from its informer cache. Right after the autoscaler's own
status write the cache may still hold the object as it was read before that write: deciding from
it would decide the same wake-up again from the old status, and its conditional write would fail.
Such a decision never happened, so it must not be in the history, whose windows count from it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from shardwise.controller.autoscaling import Autoscaler
from shardwise.controller.autoscaling_store import CONFIGMAP, data_key
from shardwise.controller.settings import Settings
from shardwise.kube.client import ApiException
from shardwise.render.labels import WAKE_ANNOTATION

NS, NAME = "ns", "qwen"
WOKEN = "2026-01-01T00:00:05Z"


def scaled_to_zero() -> dict[str, Any]:
    return {
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"namespace": NS, "name": NAME, "uid": "u-1", "generation": 1, "resourceVersion": "10",
                     "annotations": {WAKE_ANNOTATION: WOKEN}},  # the gateway holds a request
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "serving": {"maxModelLen": 2048, "maxConcurrency": 4}, "parallelism": {"objective": "Cost"},
                 "autoscaling": {"minReplicas": 0, "maxReplicas": 2, "allowScaleToZero": True,
                                 "slo": {"ttftP95": "2s"}, "evaluationPeriodSeconds": 5}},
        "status": {"desiredReplicas": 0, "readyReplicas": 0,
                   "plan": {"feasible": True, "gpuProduct": "NVIDIA-A100-80GB-PCIe", "gpusPerNode": 1}},
    }


class LaggingCluster:
    """The API server (conditional status patches on `live`) and a cache that shows `cached`,
    which the test moves forward by hand: it lags the autoscaler's own writes until told."""

    def __init__(self) -> None:
        self.live = scaled_to_zero()
        self.cached = copy.deepcopy(self.live)
        self.configmap: dict[str, Any] | None = None
        self.writes: list[dict[str, Any]] = []
        self.conflicts = 0
        self.events: list[dict[str, Any]] = []

    def catch_up(self) -> None:
        self.cached = copy.deepcopy(self.live)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "ConfigMap":
            return self.configmap
        return copy.deepcopy(self.cached)

    def list_inference_deployments(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.cached)]

    def list(self, path: str, **query: Any) -> list[dict[str, Any]]:
        return []  # no HorizontalPodAutoscalers

    def list_gpu_pods(self) -> list[dict[str, Any]]:
        return []

    def list_nodes(self) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "a1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe",
                                                       "nvidia.com/gpu.count": "4"}},
                 "status": {"allocatable": {"nvidia.com/gpu": "4"},
                            "conditions": [{"type": "Ready", "status": "True"}]}}]

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        if resource_version != self.live["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise ApiException(status=409, reason="Conflict")
        self.writes.append(status_patch)
        for key, value in status_patch.items():
            self.live["status"][key] = value
        self.live["metadata"]["resourceVersion"] = str(int(self.live["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.live)

    def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        self.configmap = copy.deepcopy(obj)
        return obj


def stored_runs(kube: LaggingCluster) -> list[list[Any]]:
    assert kube.configmap is not None and kube.configmap["metadata"]["name"] == CONFIGMAP
    return json.loads(kube.configmap["data"][data_key(NS, NAME)])["runs"]


def scale_ups(kube: LaggingCluster) -> list[str]:
    return [e["message"] for e in kube.events if e["reason"] == "ScaledUp"]


def test_an_evaluation_from_a_cache_that_predates_its_own_write_decides_and_records_nothing() -> None:
    kube = LaggingCluster()
    clock = [1000.0]
    woken: list[tuple[str, str]] = []
    scaler = Autoscaler(kube, Settings(), latest=lambda ns, name: None,  # type: ignore[arg-type]
                        reconcile=lambda ns, name: woken.append((ns, name)), clock=lambda: clock[0])
    scaler.wake(NS, NAME)
    scaler.tick()
    assert kube.live["status"]["desiredReplicas"] == 1, kube.writes
    first = stored_runs(kube)
    assert [run[2] for run in first] == [1] and woken == [(NS, NAME)]

    # The gateway still holds the request and asks again; the cache has not seen the write yet.
    clock[0] += 1.0
    scaler.wake(NS, NAME)
    scaler.tick()
    assert stored_runs(kube) == first, "a decision recorded that was not written"
    assert kube.conflicts == 0, "decided from the object as it was before its own write"
    assert len(kube.writes) == 1 and len(scale_ups(kube)) == 1, scale_ups(kube)

    # Once the cache holds the write, evaluations go on: a hold at one replica, remembered.
    kube.catch_up()
    clock[0] += 5.0
    scaler.wake(NS, NAME)
    scaler.tick()
    assert kube.conflicts == 0 and len(scale_ups(kube)) == 1
    assert json.loads(kube.configmap["data"][data_key(NS, NAME)])["evaluatedAt"] == clock[0]  # type: ignore[index]
    assert stored_runs(kube)[0] == first[0], "the wake-up's run starts when it was written"


def test_a_decision_whose_status_write_conflicts_is_not_remembered() -> None:
    kube = LaggingCluster()
    # Another writer (reconcile) changed the status after the cache's copy was taken.
    kube.live["metadata"]["resourceVersion"] = "11"
    clock = [1000.0]
    scaler = Autoscaler(kube, Settings(), latest=lambda ns, name: None,  # type: ignore[arg-type]
                        reconcile=lambda ns, name: None, clock=lambda: clock[0])
    scaler.wake(NS, NAME)
    scaler.tick()
    assert kube.conflicts == 1 and not kube.writes and not kube.events
    assert kube.configmap is None, "a decision that was never applied went into the stored history"

    # The retry a second later, from the fresh object, is the one decision remembered.
    kube.catch_up()
    clock[0] += 1.0
    scaler.tick()
    assert kube.live["status"]["desiredReplicas"] == 1 and len(scale_ups(kube)) == 1
    assert [(run[0], run[2]) for run in stored_runs(kube)] == [(1001.0, 1)]
