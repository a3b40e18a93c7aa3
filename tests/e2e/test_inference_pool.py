"""spec.routing on a real API server with the Gateway API Inference Extension v1.5.0 CRDs.

The CRDs come from their pinned Go modules (hack/fetch-gie-crds.sh, cached outside the clone).
The API server validates every pool and route shardwise writes against the upstream schema. No
gateway runs here: a gateway's verdict is written onto the pool's status by hand, as a GIE
gateway writes it, and must come back on the InferenceDeployment as `Routed`.

The cluster without the CRD is covered by tests/unit/controller/test_reconcile_missing_pool.py
and tests/unit/decide/test_routing.py: a CRD cannot leave the shared session cluster safely.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, writes_by

pytestmark = pytest.mark.e2e

LABEL = "shardwise.io/inference-deployment"


def routed_model(name: str, replicas: int = 1, **routing: Any) -> str:
    spec = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": f"{name}-served"},
        "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        "parallelism": {"objective": "Cost"},
        "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]},
        "replicas": replicas,
        "routing": {"inferencePool": {"endpointPicker": {"name": "my-epp", "port": 9002}}, **routing},
    }
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": name}, "spec": spec})


def condition(kubectl: Kubectl, name: str, type_: str, reason: str) -> dict[str, Any] | None:
    found = kubectl.condition(name, type_)
    return found if found is not None and found["reason"] == reason else None


def test_the_pool_selects_the_serving_pods_and_scaling_leaves_it_alone(
        routing_crds: None, operator: OperatorProcess, kubectl: Kubectl) -> None:
    name = "pooled"
    kubectl.apply_yaml(routed_model(name, httpRoute={"gatewayRef": {"name": "inference-gateway"}}))
    pool = eventually(lambda: kubectl.get("inferencepool", name), timeout=90, what="InferencePool")
    infd = kubectl.get("infd", name)
    [owner] = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceDeployment", name, infd["metadata"]["uid"], True)
    assert pool["spec"]["selector"] == {"matchLabels": {LABEL: name}}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["appProtocol"] == "http"
    assert pool["spec"]["endpointPickerRef"] == {"group": "", "kind": "Service", "name": "my-epp",
                                                 "port": {"number": 9002}, "failureMode": "FailClose"}

    models = eventually(lambda: kubectl.get("configmap", f"{name}-bbr-models"), timeout=30,
                        what="the body-based router's ConfigMap")
    assert models["metadata"]["labels"]["inference.networking.k8s.io/bbr-managed"] == "true"
    assert models["data"] == {"baseModel": f"{name}-served"}
    assert models["metadata"]["ownerReferences"][0]["uid"] == infd["metadata"]["uid"]

    route = eventually(lambda: kubectl.get("httproute", name), timeout=30, what="HTTPRoute")
    assert route["metadata"]["ownerReferences"][0]["uid"] == infd["metadata"]["uid"]
    [rule] = route["spec"]["rules"]
    assert rule["matches"][0]["headers"] == [{"type": "Exact", "name": "X-Gateway-Base-Model-Name",
                                              "value": f"{name}-served"}]
    assert [(b["group"], b["kind"], b["name"]) for b in rule["backendRefs"]] == [
        ("inference.networking.k8s.io", "InferencePool", name)]
    assert route["spec"]["parentRefs"][0]["name"] == "inference-gateway"

    eventually(lambda: condition(kubectl, name, "Routed", "NoParents"), timeout=30, what="Routed NoParents")

    # Scale up: the pool's spec (and so its generation) stays; the new pods match its selector.
    before = kubectl.get("inferencepool", name)["metadata"]
    kubectl.run("patch", "infd", name, "--type=merge", "-p", json.dumps({"spec": {"replicas": 2}}))

    def two_serving() -> list[dict[str, Any]]:
        pods = (kubectl.get("pods", selector=f"{LABEL}={name}") or {}).get("items") or []
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return live if len(live) == 2 else []

    pods = eventually(two_serving, timeout=90, what="two pods of the scaled deployment")
    for pod in pods:
        assert pod["metadata"]["labels"][LABEL] == name  # the pool's selector covers them
    after = kubectl.get("inferencepool", name)["metadata"]
    assert (after["generation"], after["resourceVersion"]) == (before["generation"], before["resourceVersion"])

    # A gateway's verdict, written as a GIE gateway writes it, comes back as Routed.
    def verdict(status: str, reason: str) -> str:
        cond = {"type": "ResolvedRefs", "status": status, "reason": reason, "message": f"picker {reason}",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": after["generation"]}
        accepted = {**cond, "type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"}
        return json.dumps({"status": {"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway",
                          "namespace": kubectl.namespace},
            "controllerName": "example.com/gateway-controller", "conditions": [accepted, cond]}]}})

    kubectl.run("patch", "inferencepool", name, "--subresource=status", "--type=merge",
                "-p", verdict("False", "InvalidExtensionRef"))
    found = eventually(lambda: condition(kubectl, name, "Routed", "InvalidExtensionRef"), timeout=30,
                       what="Routed InvalidExtensionRef")
    assert found["status"] == "False" and "picker InvalidExtensionRef" in found["message"]
    events = kubectl.get("events", selector=None)["items"]
    assert any(e["reason"] == "InvalidExtensionRef" and e["involvedObject"]["name"] == name for e in events)
    kubectl.run("patch", "inferencepool", name, "--subresource=status", "--type=merge",
                "-p", verdict("True", "ResolvedRefs"))
    # The route has no parents yet (no gateway wrote its status): still pending on it.
    eventually(lambda: condition(kubectl, name, "Routed", "NoParents"), timeout=30, what="Routed back to NoParents")

    # Routing turned off: our pool and route go, and so does the condition.
    kubectl.run("patch", "infd", name, "--type=json", "-p", json.dumps([{"op": "remove", "path": "/spec/routing"}]))
    eventually(lambda: kubectl.get("inferencepool", name) is None and kubectl.get("httproute", name) is None
               and kubectl.get("configmap", f"{name}-bbr-models") is None,
               timeout=30, what="pool, route and BBR entry deleted")
    eventually(lambda: kubectl.condition(name, "Routed") is None, timeout=30, what="Routed removed")


def test_a_foreign_pool_of_the_same_name_is_a_conflict_left_untouched(
        routing_crds: None, operator: OperatorProcess, kubectl: Kubectl) -> None:
    name = "taken"
    kubectl.apply_yaml(yaml.safe_dump({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "by-hand"}}, "targetPorts": [{"number": 8080}],
                 "endpointPickerRef": {"name": "their-epp", "port": {"number": 9002}}}}))
    kubectl.apply_yaml(routed_model(name))
    degraded = eventually(lambda: condition(kubectl, name, "Degraded", "ChildConflict"), timeout=60,
                          what="Degraded ChildConflict")
    assert f"InferencePool {kubectl.namespace}/{name} already exists" in degraded["message"]
    assert condition(kubectl, name, "Routed", "ChildConflict") is not None
    pool = kubectl.get("inferencepool", name)
    assert pool["spec"]["selector"] == {"matchLabels": {"app": "by-hand"}}
    assert not pool["metadata"].get("ownerReferences")
    assert kubectl.get("deployment", name) is None  # touch nothing, as with any other conflict


ROUTING_RESOURCES = {"inferencepools", "httproutes", "configmaps"}


def _routing_writes(kubectl: Kubectl) -> list[dict[str, Any]]:
    return [e for e in writes_by(kubectl.cluster, OPERATOR_USER, kubectl.namespace)
            if e["objectRef"].get("resource") in ROUTING_RESOURCES]


def test_a_restart_rewrites_none_of_the_routing_children(
        routing_crds: None, operator: OperatorProcess, kubectl: Kubectl) -> None:
    name = "kept"
    kubectl.apply_yaml(routed_model(name, httpRoute={"gatewayRef": {"name": "inference-gateway"}}))
    eventually(lambda: kubectl.get("httproute", name) and kubectl.get("configmap", f"{name}-bbr-models"),
               timeout=90, what="pool, BBR entry and route")
    before = {k: kubectl.get(k, n)["metadata"]["resourceVersion"]
              for k, n in (("inferencepool", name), ("httproute", name), ("configmap", f"{name}-bbr-models"))}
    written = len(_routing_writes(kubectl))
    assert written >= 3, "the audit log saw no routing writes: the check would be vacuous"
    operator.restart()
    eventually(lambda: operator.probe("/readyz")[0] == 200, timeout=60, what="operator ready after restart")
    time.sleep(4 * 3.0)  # a quiet period: four resync periods of the test operator (resync_seconds=3)
    new = _routing_writes(kubectl)[written:]
    assert new == [], [f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')}" for e in new]
    after = {k: kubectl.get(k, n)["metadata"]["resourceVersion"]
             for k, n in (("inferencepool", name), ("httproute", name), ("configmap", f"{name}-bbr-models"))}
    assert after == before
