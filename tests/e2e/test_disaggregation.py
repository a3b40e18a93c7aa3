"""A disaggregated InferenceDeployment on a real control plane (KWOK nodes and pods): both role
Deployments created as ours, Ready only with both roles, the status and `kubectl get` per role,
an operator restart that writes nothing, and deletion collecting both roles. Every wait is a
bounded poll that reports what it last saw."""

from __future__ import annotations

import json

import httpx
import pytest

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, simulated_fleet, writes_by
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


def test_the_local_fleet_runs_the_pair_and_the_routers_two_calls_hand_the_kv_over(
        operator: OperatorProcess, kubectl: Kubectl, cluster: LocalCluster) -> None:
    """`shardwise-sim fleet` reads each role from the operator's rendered pods: the prefill pod's
    engine answers with kv_transfer_params, the decode pod's engine takes them."""
    fleet = simulated_fleet(cluster, kubectl.namespace, "pd")
    fleet.start()
    try:
        kubectl.apply_yaml(small_model("pair", disaggregation={"mode": "Disaggregated"}))
        eventually(lambda: ready(kubectl, "pair"), timeout=120, what="pair Ready")

        def engine_of(role: str) -> str:
            pods = kubectl.get("pods", selector=f"shardwise.io/inference-deployment=pair,shardwise.io/role={role}")
            url = f"http://{pods['items'][0]['status']['podIP']}:8000"
            return url if httpx.get(url + "/health", timeout=2).status_code == 200 else ""

        prefill = eventually(lambda: engine_of("prefill"), timeout=60, what="the prefill pod's engine")
        decode = eventually(lambda: engine_of("decode"), timeout=60, what="the decode pod's engine")
        body = {"model": "pair", "prompt": "x" * 4000, "max_tokens": 1}  # served as the resource name
        first = httpx.post(prefill + "/v1/completions", json=body, timeout=30).json()
        params = first.get("kv_transfer_params")
        assert params and params["do_remote_prefill"] is True, first
        answer = httpx.post(decode + "/v1/completions", timeout=30,
                            json={**body, "max_tokens": 4, "kv_transfer_params": params}).json()
        assert answer["usage"]["completion_tokens"] == 4 and answer.get("kv_transfer_params") is None, answer
    finally:
        fleet.stop()
