"""decide for a disaggregated deployment: both role workloads applied as ours, the status per role,
Ready only when both roles serve, nothing written when nothing changed, and the switch from one
pool to a pair (the aggregated Deployment goes only once both roles serve)."""

from __future__ import annotations

import copy
from typing import Any

from shardwise.decide import reconcile
from shardwise.decide.reconcile import decide
from tests.unit.decide.test_decide import (
    DEPLOYMENT, NAME, SERVICE, T1, UID, condition, converge, infd, live, snapshot, written)

PREFILL = ("apps/v1", "Deployment", f"{NAME}-prefill")
DECODE = ("apps/v1", "Deployment", f"{NAME}-decode")
PREFILL_SERVICE = ("v1", "Service", f"{NAME}-prefill")
PAIR = {"mode": "Disaggregated", "prefill": {"replicas": 2}, "decode": {"replicas": 1}}


def unseen() -> dict[Any, Any]:
    return {SERVICE: None, PREFILL: None, DECODE: None, PREFILL_SERVICE: None}


def run(children: dict[Any, Any], key: Any, replicas: int, *, ready: bool = True) -> tuple[dict[Any, Any], list[Any]]:
    """The Deployment controller and kubelet at work on one role's Deployment."""
    deployment = copy.deepcopy(children[key])
    template = deployment["spec"]["template"]
    pods = [{"metadata": {"name": f"{key[2]}-{i}", "namespace": "ns", "uid": f"{key[2]}-{i}",
                          "labels": dict(template["metadata"]["labels"])},
             "spec": {**copy.deepcopy(template["spec"]), "nodeName": f"n{i}"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}
            for i in range(replicas)]
    deployment["status"] = {"observedGeneration": deployment["metadata"]["generation"], "replicas": replicas,
                            "readyReplicas": replicas if ready else 0, "updatedReplicas": replicas}
    return {**children, key: deployment}, pods


def test_the_steady_state_names_are_looked_up_before_deciding() -> None:
    spec = reconcile.parse_spec(infd(disaggregation=PAIR))
    assert not isinstance(spec, str)
    keys = reconcile.keys_to_check(NAME, None, lws_installed=True, spec=spec)
    assert keys == [SERVICE, PREFILL, DECODE, PREFILL_SERVICE]
    assert {PREFILL, DECODE} <= set(reconcile.workload_keys(NAME))


def test_both_roles_are_applied_as_ours_and_the_status_counts_each_role() -> None:
    decision = decide(snapshot(infd(disaggregation=PAIR), children=unseen()))
    assert not decision.lookups
    applied = {reconcile.key_of(a.obj): a.obj for a in decision.apply}
    assert set(applied) == {PREFILL, DECODE, SERVICE, PREFILL_SERVICE}, set(applied)
    for key in (PREFILL, DECODE):
        owner = applied[key]["metadata"]["ownerReferences"][0]
        assert (owner["uid"], owner["controller"]) == (UID, True)
    assert applied[PREFILL]["spec"]["replicas"] == 2 and applied[DECODE]["spec"]["replicas"] == 1
    status = decision.status or {}
    assert condition(status, "Ready") == ("False", "ReplicasNotReady")
    assert status["roles"]["prefill"]["desiredReplicas"] == 2 and status["roles"]["decode"]["readyReplicas"] == 0
    assert status["desiredReplicas"] == 3 and status["roleSummary"] == "prefill 0/2 TP1, decode 0/1 TP1"


def test_ready_only_when_both_roles_serve_and_an_idle_pass_writes_nothing() -> None:
    resource = infd(disaggregation=PAIR)
    first = decide(snapshot(resource, children=unseen()))
    resource = written(resource, first)
    children = {**unseen(), **live(first)}
    children, decode_pods = run(children, DECODE, 1)
    half = decide(snapshot(resource, children=children, pods=decode_pods, now=T1))
    assert condition(half.status or {}, "Ready") == ("False", "ReplicasNotReady")
    message = next(c["message"] for c in (half.status or {})["conditions"] if c["type"] == "Ready")
    assert message == "prefill 0/2, decode 1/1 replicas ready"
    children, prefill_pods = run(children, PREFILL, 2)
    pods = decode_pods + prefill_pods
    whole = decide(snapshot(resource, children=children, pods=pods, now=T1))
    status = whole.status or {}
    assert condition(status, "Ready") == ("True", "Ready") and status["phase"] == "Ready"
    assert (status["readyReplicas"], status["replicas"]) == (3, 3)
    assert status["roles"]["prefill"]["readyReplicas"] == 2 and status["roles"]["decode"]["layout"] == "TP1"
    assert whole.apply == () and whole.delete == ()
    resource = written(resource, whole)
    idle = decide(snapshot(resource, children=children, pods=pods, now="2026-01-01T01:00:00Z"))
    assert (idle.apply, idle.status_patch, idle.events, idle.delete) == ((), {}, (), ())


def test_a_role_tensor_degree_is_its_layout() -> None:
    pair = {**PAIR, "decode": {"replicas": 1, "tensor": 2}}
    decision = decide(snapshot(infd(disaggregation=pair), nodes=3, children=unseen()))
    status = decision.status or {}
    assert status["roles"]["decode"]["layout"] == "TP2" and status["roles"]["decode"]["gpusPerReplica"] == 2
    assert status["roles"]["prefill"]["layout"] == f"TP{status['plan']['tensorParallel']}"


def test_switching_to_a_pair_deletes_the_single_pool_only_once_both_roles_serve() -> None:
    resource, children, pods = converge(infd())
    resource = copy.deepcopy(resource)
    resource["spec"]["disaggregation"] = PAIR
    resource["metadata"]["generation"] = 2
    children = {**children, **unseen(), SERVICE: children[SERVICE]}
    starting = decide(snapshot(resource, children=children, pods=pods, now=T1))
    started = {reconcile.key_of(a.obj) for a in starting.apply}
    assert {PREFILL, DECODE} <= started and starting.delete == ()
    # The model's Service keeps selecting the running pool until both roles serve.
    assert DEPLOYMENT not in started and SERVICE not in started, started
    resource = written(resource, starting)
    children = {**children, **live(starting)}
    children, decode_pods = run(children, DECODE, 1)
    children, prefill_pods = run(children, PREFILL, 2)
    served = decide(snapshot(resource, children=children, pods=pods + decode_pods + prefill_pods, now=T1))
    assert [reconcile.key_of(o) for o in served.delete] == [DEPLOYMENT]
    service = next(a.obj for a in served.apply if reconcile.key_of(a.obj) == SERVICE)
    assert service["spec"]["selector"]["shardwise.io/role"] == "decode"
    assert condition(served.status or {}, "Ready") == ("True", "Ready")

