"""spec.routing through decide: the InferencePool and HTTPRoute as children, plain dicts in and out.

The pool selects exactly the serving pods by label (leaders for multi-node), so scaling never
changes it; a missing CRD creates nothing and says how to install it; a foreign namesake is a
ChildConflict; the gateways' status.parents conditions become `Routed`.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from shardwise.decide import reconcile, routing as routing_status
from shardwise.decide.reconcile import decide
from shardwise.render import routing

from tests.unit.decide.test_decide import (DEPLOYMENT, NAME, NS, SERVICE, T1, UID, condition, infd, live,
                                           serving, snapshot, written)

POOL = (routing.POOL_API_VERSION, routing.POOL_KIND, NAME)
ROUTE = (routing.ROUTE_API_VERSION, routing.ROUTE_KIND, NAME)
BBR = ("v1", "ConfigMap", f"{NAME}-bbr-models")
PICKER = {"name": "my-epp", "port": 9002}


def routed(**routing_spec: Any) -> dict[str, Any]:
    return infd(routing={"inferencePool": {"endpointPicker": PICKER}, **routing_spec},
                model={"name": "meta-llama/Llama-3.1-8B-Instruct", "servedName": "llama"})


def first_pass(resource: dict[str, Any], **extra: Any) -> reconcile.Decision:
    return decide(snapshot(resource, children={SERVICE: None, DEPLOYMENT: None, POOL: None, BBR: None, ROUTE: None}, **extra))


def applied(decision: reconcile.Decision, kind: str) -> dict[str, Any]:
    return next(a.obj for a in decision.apply if a.obj["kind"] == kind)


def test_the_pool_selects_the_serving_pods_on_vllms_port_with_the_named_picker() -> None:
    decision = first_pass(routed())
    assert [a.obj["kind"] for a in decision.apply] == ["Deployment", "Service", "InferencePool", "ConfigMap"]
    pool = applied(decision, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == UID
    assert pool["metadata"]["ownerReferences"][0]["controller"] is True
    assert pool["spec"] == {
        "selector": {"matchLabels": {"shardwise.io/inference-deployment": NAME}},
        "targetPorts": [{"number": 8000}], "appProtocol": "http",
        "endpointPickerRef": {"kind": "Service", "name": "my-epp", "port": {"number": 9002},
                              "failureMode": "FailClose"}}
    # The pool's selector is the Deployment's pods' (every serving pod, nothing else).
    template = applied(decision, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= template.items()
    assert condition(decision.status or {}, "Routed") == ("Unknown", "NoParents")


def test_the_http_route_matches_the_served_name_to_the_pool_under_the_named_gateway() -> None:
    decision = first_pass(routed(httpRoute={"gatewayRef": {"name": "inference-gw", "namespace": "gw",
                                                           "sectionName": "http"}}))
    assert [a.obj["kind"] for a in decision.apply][-3:] == ["InferencePool", "ConfigMap", "HTTPRoute"]
    route = applied(decision, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "inference-gw", "namespace": "gw", "sectionName": "http"}]
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["headers"] == [{"type": "Exact", "name": "X-Gateway-Base-Model-Name",
                                              "value": "llama"}]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": NAME}]


def test_the_body_based_router_learns_the_served_name_and_the_adapters_of_each_pool() -> None:
    # GIE v1.5.0's BBR sets X-Gateway-Base-Model-Name from these ConfigMaps, "" for a model none
    # names: without one the HTTPRoute never matches (found against the upstream BBR, e2e).
    models = applied(first_pass(routed()), "ConfigMap")
    assert models["metadata"]["labels"]["inference.networking.k8s.io/bbr-managed"] == "true"
    assert models["metadata"]["labels"]["shardwise.io/inference-deployment"] == NAME  # our child, watched
    assert models["metadata"]["ownerReferences"][0]["uid"] == UID
    assert models["data"] == {"baseModel": "llama"}
    resource = routed()
    resource["spec"]["adapters"] = [{"name": "sql-lora", "source": {"repo": "acme/sql-lora"}},
                                    {"name": "chat-lora", "source": {"repo": "acme/chat-lora"}}]
    with_adapters = routing.build_bbr_models(routing.Owner(name=NAME, namespace=NS, uid=UID),
                                             reconcile.parse_spec(resource))  # type: ignore[arg-type]
    assert with_adapters["data"]["baseModel"] == "llama"
    assert yaml.safe_load(with_adapters["data"]["adapters"]) == ["sql-lora", "chat-lora"]


def test_routing_names_are_looked_up_before_they_are_created() -> None:
    decision = decide(snapshot(routed()))  # the shell did not look the pool's name up
    assert decision.lookups == (POOL, BBR)
    spec = reconcile.parse_spec(routed(httpRoute={"gatewayRef": {"name": "g"}}))
    assert not isinstance(spec, str)
    assert reconcile.keys_to_check(NAME, None, lws_installed=True, spec=spec) == [SERVICE, DEPLOYMENT, POOL, BBR,
                                                                                      ROUTE]
    assert reconcile.keys_to_check(NAME, None, lws_installed=True, spec=spec, pool_installed=False) == [
        SERVICE, DEPLOYMENT]


def test_scaling_changes_nothing_in_the_pool() -> None:
    resource = routed()
    first = first_pass(resource)
    resource = written(resource, first)
    children, pods = serving(live(first), 1)
    second = decide(snapshot(resource, children=children, pods=pods, now=T1))
    resource = written(resource, second)
    resource["spec"]["replicas"] = 3
    resource["metadata"]["generation"] = 2
    third = decide(snapshot(resource, nodes=3, children=children, pods=pods, now=T1))
    assert [a.obj["kind"] for a in third.apply] == ["Deployment"]  # the pool is left as it is


def test_multi_node_pools_select_the_leaders_only() -> None:
    plan = {"nodesPerReplica": 2}
    assert routing.serving_selector(NAME, plan) == {"shardwise.io/inference-deployment": NAME,
                                                     "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert routing.serving_selector(NAME, {"nodesPerReplica": 1}) == {"shardwise.io/inference-deployment": NAME}


def test_without_the_pool_crd_nothing_is_created_and_routed_says_how_to_install_it() -> None:
    resource = routed(httpRoute={"gatewayRef": {"name": "g"}})
    decision = decide(snapshot(resource, pool_installed=False, route_installed=False))
    assert [a.obj["kind"] for a in decision.apply] == ["Deployment", "Service"]  # serving goes on
    status = decision.status or {}
    assert condition(status, "Routed") == ("False", "InferencePoolNotInstalled")
    message = next(c for c in status["conditions"] if c["type"] == "Routed")["message"]
    assert "inference.networking.k8s.io/v1 InferencePool" in message and "manifests.yaml" in message
    assert condition(status, "Degraded") == ("False", "AsExpected")
    assert ("Warning", "InferencePoolNotInstalled") in [e[:2] for e in decision.events]
    # Still missing next time: no status write, the time stays.
    resource = written(resource, decision)
    again = decide(snapshot(resource, children=live(decision), pool_installed=False, route_installed=False, now=T1))
    assert not again.status_patch and not again.apply


def test_without_the_gateway_api_the_pool_is_still_created() -> None:
    resource = routed(httpRoute={"gatewayRef": {"name": "g"}})
    decision = first_pass(resource, route_installed=False)
    assert [a.obj["kind"] for a in decision.apply] == ["Deployment", "Service", "InferencePool", "ConfigMap"]
    assert condition(decision.status or {}, "Routed") == ("False", "HTTPRouteNotInstalled")


def test_a_foreign_pool_of_the_same_name_is_a_conflict_and_nothing_is_touched() -> None:
    foreign = {"apiVersion": routing.POOL_API_VERSION, "kind": "InferencePool",
               "metadata": {"name": NAME, "namespace": NS, "uid": "other"}, "spec": {}}
    decision = decide(snapshot(routed(), children={SERVICE: None, DEPLOYMENT: None, POOL: foreign, BBR: None}))
    assert not decision.apply and not decision.delete
    status = decision.status or {}
    assert condition(status, "Degraded") == ("True", "ChildConflict")
    assert "InferencePool ns/m already exists" in next(c["message"] for c in status["conditions"]
                                                       if c["type"] == "Degraded")
    assert condition(status, "Routed") == ("False", "ChildConflict")


def _with_parents(pool: dict[str, Any], *conds: tuple[str, str, str]) -> dict[str, Any]:
    out = copy.deepcopy(pool)
    out["status"] = {"parents": [{"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                                "name": "gw", "namespace": NS},
                                  "conditions": [{"type": t, "status": s, "reason": r, "message": f"{t} {s}"}
                                                 for t, s, r in conds]}]}
    return out


def test_the_gateways_verdict_on_the_pool_becomes_routed() -> None:
    resource = routed()
    first = first_pass(resource)
    children = live(first)
    cases = [
        ((("Accepted", "True", "Accepted"), ("ResolvedRefs", "True", "ResolvedRefs")), ("True", "Accepted")),
        ((("Accepted", "True", "Accepted"), ("ResolvedRefs", "False", "InvalidExtensionRef")),
         ("False", "InvalidExtensionRef")),
        ((("Accepted", "False", "NotSupportedByParent"),), ("False", "NotSupportedByParent")),
        ((("Accepted", "Unknown", "Pending"),), ("Unknown", "Pending")),
    ]
    for conds, want in cases:
        seen = {**children, POOL: _with_parents(children[POOL], *conds)}
        decision = decide(snapshot(written(resource, first), children=seen, now=T1))
        assert condition(decision.status or {}, "Routed") == want, conds
        assert not [a for a in decision.apply if a.obj["kind"] == "InferencePool"]  # status is not our spec


def test_routing_turned_off_deletes_our_routing_children_and_the_condition() -> None:
    resource = routed()
    first = first_pass(resource)
    resource = written(resource, first)
    assert condition(resource["status"], "Routed")[0] == "Unknown"
    made = live(first)
    pool, models = made.pop(POOL), made.pop(BBR)
    children, pods = serving(made, 1)
    del resource["spec"]["routing"]
    decision = decide(snapshot(resource, children=children, pods=pods, owned_routing={POOL: pool, BBR: models},
                               now=T1))
    assert [d["kind"] for d in decision.delete] == ["InferencePool", "ConfigMap"]
    assert "Routed" not in {c["type"] for c in (decision.status or {})["conditions"]}
    foreign = {**pool, "metadata": {**pool["metadata"], "ownerReferences": []}}
    decision = decide(snapshot(resource, children=children, pods=pods, owned_routing={POOL: foreign}, now=T1))
    assert not decision.delete  # never someone else's


def test_a_route_without_a_pool_is_refused_by_the_spec() -> None:
    resource = infd(routing={"httpRoute": {"gatewayRef": {"name": "g"}}})
    assert "needs routing.inferencePool enabled" in str(reconcile.parse_spec(resource))
    assert routing_status.missing_apis(reconcile.parse_spec(routed()), pool_installed=True,  # type: ignore[arg-type]
                                       route_installed=False) == ()
