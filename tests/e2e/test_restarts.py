"""Operator restarts move nothing: the same plans, the same pods, no false alarm.

Ten running deployments on a cluster of three GPU products, some pinned to a product and some
free to go anywhere; the operator is restarted ten times (half graceful, half SIGKILL). A restart
that planned from a half-filled cache would re-plan the unpinned ones onto another product and
roll their pods, or call them unplaceable for a moment: every one of those leaves a trace this
test reads (a new ReplicaSet, a changed plan, a condition's transition time, a Warning event).
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.support import Kubectl, OperatorProcess, eventually

pytestmark = pytest.mark.e2e

PINNED = {0: "NVIDIA-H100-80GB-HBM3", 1: "NVIDIA-L40S", 2: "NVIDIA-A100-80GB-PCIe", 3: "NVIDIA-H100-80GB-HBM3"}
COUNT = 10
SELECTOR = "shardwise.io/inference-deployment"


def manifest(index: int) -> str:
    spec = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
            "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
            "parallelism": {"objective": "Cost"},
            "replicas": 1}
    if index in PINNED:
        spec["placement"] = {"gpuProducts": [PINNED[index]]}
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": f"steady-{index}"}, "spec": spec})


def all_ready(kubectl: Kubectl) -> list[dict]:
    items = kubectl.get("infd")["items"]
    done = [i for i in items if (i.get("status") or {}).get("phase") == "Ready"
            and i["status"].get("observedGeneration") == i["metadata"]["generation"]]
    return items if len(done) == COUNT else []


def gpu_pods_elsewhere(kubectl: Kubectl) -> list[str]:
    """Pods of other tests' namespaces (still being deleted) that hold GPUs of the shared fleet."""
    pods = json.loads(kubectl.cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
            if p["metadata"]["namespace"] != kubectl.namespace
            and any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
                    for c in p["spec"].get("containers") or [])]


def snapshot(kubectl: Kubectl) -> dict[str, dict]:
    out: dict[str, dict] = {}
    replicasets = kubectl.get("replicasets")["items"]
    for item in kubectl.get("infd")["items"]:
        name, status = item["metadata"]["name"], item["status"]
        out[name] = {
            "plan": status["plan"],
            "replicasets": sorted(r["metadata"]["name"] for r in replicasets
                                  if r["metadata"].get("labels", {}).get(SELECTOR) == name),
            "transitions": {c["type"]: c["lastTransitionTime"] for c in status["conditions"]},
        }
    return out


def warnings(kubectl: Kubectl) -> list[str]:
    """The operator's Warning events (the local cluster's endpoints controller warns about loopback
    pod IPs on its own; that is not ours)."""
    return [f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}"
            for e in kubectl.get("events")["items"]
            if e.get("type") == "Warning" and e["involvedObject"].get("kind") == "InferenceDeployment"]


def test_ten_restarts_change_no_plan_roll_no_pod_and_raise_no_warning(operator: OperatorProcess,
                                                                      kubectl: Kubectl) -> None:
    # The ten need most of the fleet: GPUs still held by an earlier test's namespace being deleted
    # would leave one Unschedulable for a while (a true Warning, but not what this test is about).
    eventually(lambda: not gpu_pods_elsewhere(kubectl), timeout=180, what="GPUs freed by earlier tests")
    kubectl.apply_yaml("---\n".join(manifest(i) for i in range(COUNT)))
    eventually(lambda: all_ready(kubectl), timeout=240, what=f"all {COUNT} deployments Ready")
    # The observer's verdict on the ready pods (True or False; Unknown means it has not scraped
    # them yet, and its first scrape would move the condition after the baseline is taken).
    eventually(lambda: all(any(c["type"] == "MetricsAvailable" and c["status"] in ("True", "False")
                               for c in i["status"]["conditions"])
                           for i in all_ready(kubectl)), timeout=90, what="the observer's verdicts on ready pods")
    eventually(lambda: operator.settled(min_reconciles=COUNT), timeout=60, what="the operator to settle")
    before = snapshot(kubectl)
    products = {s["plan"]["gpuProduct"] for s in before.values()}
    assert len(products) >= 2, f"the fleet should span products: {products}"
    for name, state in before.items():  # a new deployment rolls out once: exactly one ReplicaSet
        assert len(state["replicasets"]) == 1, f"{name}: {state['replicasets']}"
    # No engine serves these pods' /metrics: one MetricsScrapeFailed each is expected, and nothing else.
    warned = warnings(kubectl)
    assert all("MetricsScrapeFailed" in w for w in warned), [w for w in warned if "MetricsScrapeFailed" not in w]

    for restart in range(10):
        if restart % 2:
            operator.kill()
            operator.start()
        else:
            operator.restart()
        eventually(lambda: operator.settled(min_reconciles=COUNT), timeout=90,
                   what=f"the operator to settle after restart {restart + 1}")
        assert operator.probe("/readyz")[0] == 200

    after = snapshot(kubectl)
    changed = {n: (before[n], after.get(n)) for n in before if before[n] != after.get(n)}
    assert changed == {}, f"restarts changed: {changed}"
    now = warnings(kubectl)
    assert sorted(now) == sorted(warned), f"restarts raised warnings: {sorted(set(now) - set(warned))}"
    assert all_ready(kubectl)
