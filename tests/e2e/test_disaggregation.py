"""A disaggregated InferenceDeployment on a real control plane (KWOK nodes and pods): both role
Deployments created as ours, Ready only with both roles, the status and `kubectl get` per role,
an operator restart that writes nothing, and deletion collecting both roles. Every wait is a
bounded poll that reports what it last saw."""

from __future__ import annotations

import json

import pytest

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, writes_by
from tests.e2e.test_lifecycle import _stable_count, ready, small_model

pytestmark = pytest.mark.e2e

PAIR = {"mode": "Disaggregated", "prefill": {"replicas": 2}, "decode": {"replicas": 1}}


def test_a_pair_is_ready_with_both_roles_survives_a_restart_unchanged_and_is_collected(
        operator: OperatorProcess, kubectl: Kubectl, cluster: LocalCluster) -> None:
    kubectl.apply_yaml(small_model("pd", disaggregation=PAIR))
    infd = eventually(lambda: ready(kubectl, "pd"), timeout=120, what="pd Ready")
    status = infd["status"]
    roles = status["roles"]
    assert (roles["prefill"]["readyReplicas"], roles["decode"]["readyReplicas"]) == (2, 1), roles
    assert roles["prefill"]["layout"] == roles["decode"]["layout"] == f"TP{status['plan']['tensorParallel']}"
    assert status["readyReplicas"] == 3 and status["desiredReplicas"] == 3
    ready_condition = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready_condition["status"] == "True", ready_condition

    deployments = {d["metadata"]["name"]: d for d in kubectl.get("deployments")["items"]}
    assert set(deployments) == {"pd-prefill", "pd-decode"}, set(deployments)
    for role, deployment in (("prefill", deployments["pd-prefill"]), ("decode", deployments["pd-decode"])):
        owner = deployment["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "InferenceDeployment", "pd", infd["metadata"]["uid"], True)
        shown = json.loads(kubectl.run("get", "deployment", deployment["metadata"]["name"], "-o", "json",
                                       "--show-managed-fields").stdout)
        managers = {m["manager"] for m in shown["metadata"]["managedFields"] if m["operation"] == "Apply"}
        assert managers == {"shardwise"}, managers
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--kv-transfer-config" in args
        pods = kubectl.get("pods", selector=f"shardwise.io/inference-deployment=pd,shardwise.io/role={role}")["items"]
        assert len(pods) == PAIR[role]["replicas"]
    assert kubectl.get("service", "pd")["spec"]["selector"]["shardwise.io/role"] == "decode"
    assert kubectl.get("service", "pd-prefill")["spec"]["selector"]["shardwise.io/role"] == "prefill"

    wide = kubectl.run("get", "infd", "pd", "-o", "wide").stdout
    assert "prefill 2/2 TP" in wide and "decode 1/1 TP" in wide and "Ready" in wide, wide

    settled = len(eventually(lambda: _stable_count(cluster, kubectl.namespace), timeout=60,
                             what="operator writes to settle"))
    operator.restart()
    # A fresh operator reconciles every resource from its first sync: it must find nothing to write.
    eventually(lambda: _stable_count(cluster, kubectl.namespace), timeout=60, what="writes to settle after restart")
    after = writes_by(cluster, OPERATOR_USER, kubectl.namespace)[settled:]
    assert after == [], "the restart wrote: " + ", ".join(
        f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')}" for e in after)

    kubectl.run("delete", "infd", "pd", "--wait=true", "--timeout=60s")
    eventually(lambda: not kubectl.get("deployments")["items"] and kubectl.get("service", "pd") is None
               and kubectl.get("service", "pd-prefill") is None, timeout=90,
               what="garbage collection of both roles' Deployments and Services")
