"""Every way a workload fails shows on the InferenceDeployment as its own reason, with the words of
the API server or the kubelet, and one Warning event per transition.

Kubelet states come from KWOK stages (operator/shardwise/devcluster/kwok-pod-stages.yaml): a pod whose
image is one of the kwok.shardwise.invalid/* images gets the status a real kubelet reports for
that failure. Limits are generous (a loaded 2-core machine); the time each took is printed.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, writes_by

pytestmark = pytest.mark.e2e


def model(name: str, **spec_overrides) -> str:
    spec = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
        "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        "parallelism": {"objective": "Cost"},
        "placement": {"gpuProducts": ["NVIDIA-L40S"]},
    }
    for key, value in spec_overrides.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": name}, "spec": spec})


def degraded(kubectl: Kubectl, name: str, reason: str) -> dict | None:
    cond = kubectl.condition(name, "Degraded")
    return cond if cond and cond["status"] == "True" and cond["reason"] == reason else None


def warnings(kubectl: Kubectl, name: str) -> list[str]:
    items = kubectl.get("events", selector=None)["items"]
    return [e["reason"] for e in items if e["involvedObject"].get("kind") == "InferenceDeployment"
            and e["involvedObject"]["name"] == name and e["type"] == "Warning"]


def expect_reason(kubectl: Kubectl, name: str, reason: str, words: str) -> dict:
    started = time.monotonic()
    cond = eventually(lambda: degraded(kubectl, name, reason), timeout=120, what=f"{name}: Degraded {reason}")
    print(f"{reason}: on the status {time.monotonic() - started:.1f} s after the apply")
    assert words in cond["message"], cond["message"]
    for type_ in ("Ready", "Progressing", "Reconciling"):
        got = kubectl.condition(name, type_)
        assert (got["status"], got["reason"]) == ("False", reason), got
    assert kubectl.condition(name, "Stalled")["status"] == "True"
    return cond


@pytest.mark.parametrize("image,reason,words", [
    ("kwok.shardwise.invalid/image-pull-backoff:1", "ImagePullBackOff", "Back-off pulling image"),
    ("kwok.shardwise.invalid/crash-loop:1", "CrashLoopBackOff", "5 restarts, last exit Error (code 1)"),
    ("kwok.shardwise.invalid/oom-killed:1", "OOMKilled", "OOMKilled (exit code 137)"),
], ids=["image-pull", "crash-loop", "oom-kill"])
def test_kubelet_failures_show_as_their_reason(operator: OperatorProcess, kubectl: Kubectl, image: str,
                                               reason: str, words: str) -> None:
    kubectl.apply_yaml(model("broken", serving={"image": image}))
    expect_reason(kubectl, "broken", reason, words)
    assert "pod broken-" in kubectl.condition("broken", "Degraded")["message"]
    eventually(lambda: warnings(kubectl, "broken").count(reason) == 1, timeout=30,
               what=f"one {reason} warning event")


def test_resource_quota_of_zero_shows_as_quota_exceeded(operator: OperatorProcess, kubectl: Kubectl) -> None:
    kubectl.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "zero"},
                                       "spec": {"hard": {"pods": "0"}}}))
    # As a quota in a real namespace would be: its usage computed before the pods come. Until the quota
    # controller has done so, admission refuses with "status unknown for quota", and the ReplicaSet
    # controller keeps the first refusal it saw on the condition (unit-tested as a quota refusal too).
    eventually(lambda: (kubectl.get("resourcequota", "zero") or {}).get("status", {}).get("hard"), timeout=120,
               what="the quota controller to compute quota zero")
    kubectl.apply_yaml(model("quota"))
    expect_reason(kubectl, "quota", "QuotaExceeded", "exceeded quota: zero")


def test_a_child_the_api_server_rejects_shows_as_child_rejected(operator: OperatorProcess, kubectl: Kubectl) -> None:
    # A Secret key the core API refuses (not a valid config key) passes the CRD but not the Deployment.
    kubectl.apply_yaml(model("rejected", model={"hfTokenSecretRef": {"name": "hf", "key": "not/a key"}}))
    cond = expect_reason(kubectl, "rejected", "ChildRejected", "a valid config key must consist of")
    assert "Deployment rejected: " in cond["message"] and "Invalid value" in cond["message"]
    assert kubectl.get("deployment", "rejected") is None
    eventually(lambda: warnings(kubectl, "rejected").count("ChildRejected") == 1, timeout=30,
               what="one ChildRejected event")

    kubectl.run("patch", "infd", "rejected", "--type=json", "-p",
                '[{"op":"remove","path":"/spec/model/hfTokenSecretRef"}]')
    eventually(lambda: not degraded(kubectl, "rejected", "ChildRejected") and kubectl.get("deployment", "rejected"),
               timeout=120, what="the fixed spec applied and the failure cleared")


def snapshot(kubectl: Kubectl, kind: str, name: str) -> str:
    return json.dumps(kubectl.get(kind, name), sort_keys=True)


def test_user_objects_with_the_same_name_are_never_touched(operator: OperatorProcess, kubectl: Kubectl,
                                                           cluster: LocalCluster) -> None:
    labels = {"app": "mine"}
    kubectl.apply_yaml(yaml.safe_dump_all([
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mine", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mine"},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}},
    ]))

    def settled() -> bool:  # the deployment controller's last write: nothing changes it after this
        status = (kubectl.get("deployment", "mine") or {}).get("status") or {}
        reasons = {c["type"]: c.get("reason") for c in status.get("conditions") or []}
        return (status.get("availableReplicas") == 1 and status.get("observedGeneration") == 1
                and reasons.get("Progressing") == "NewReplicaSetAvailable" and "Available" in reasons)
    eventually(settled, timeout=90, what="the user's Deployment settled")
    before = {kind: snapshot(kubectl, kind, "mine") for kind in ("deployment", "service")}

    kubectl.apply_yaml(model("mine"))
    cond = eventually(lambda: degraded(kubectl, "mine", "ChildConflict"), timeout=90, what="ChildConflict")
    assert f"Deployment {kubectl.namespace}/mine already exists and has no controller" in cond["message"]
    assert f"Service {kubectl.namespace}/mine already exists" in cond["message"]

    kubectl.run("patch", "infd", "mine", "--type=merge", "-p", '{"spec":{"serving":{"maxModelLen":2048}}}')
    eventually(lambda: (kubectl.condition("mine", "Degraded") or {}).get("observedGeneration") == 2,
               timeout=60, what="the edit observed")
    assert degraded(kubectl, "mine", "ChildConflict")
    kubectl.run("delete", "infd", "mine", "--wait=true", "--timeout=60s")
    # Garbage collection can only take objects that carry our owner reference; equal snapshots
    # (ownerReferences included) and no operator writes show they never did.

    after = {kind: snapshot(kubectl, kind, "mine") for kind in ("deployment", "service")}
    assert after == before
    touched = [w for w in writes_by(cluster, OPERATOR_USER, kubectl.namespace)
               if (w["objectRef"].get("resource") in ("deployments", "services"))]
    assert touched == [], [(w["verb"], w["objectRef"]) for w in touched]
    assert warnings(kubectl, "mine").count("ChildConflict") == 1
