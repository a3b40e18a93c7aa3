"""The model table from InferenceDeployments and pods as plain dicts."""

from __future__ import annotations

from typing import Any

import pytest

from shardwise.gateway import routes


def infd(name: str, *, ns: str = "a", served: str | None = None, min_replicas: int | None = None,
         desired: int | None = None, replicas: int | None = None, created: str = "2026-01-01T00:00:00Z",
         deleting: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "org/m", **({"servedName": served} if served else {})}}
    if min_replicas is not None:
        spec["autoscaling"] = {"minReplicas": min_replicas}
    if replicas is not None:
        spec["replicas"] = replicas
    meta: dict[str, Any] = {"name": name, "namespace": ns, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {} if desired is None else {"desiredReplicas": desired}}


def pod(owner: str, ip: str | None, *, ns: str = "a", ready: bool = True, deleting: bool = False,
        worker: str | None = None) -> dict[str, Any]:
    labels = {routes.INSTANCE_LABEL: owner}
    if worker is not None:
        labels[routes.WORKER_INDEX_LABEL] = worker
    meta: dict[str, Any] = {"name": f"{owner}-{ip}", "namespace": ns, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return {"metadata": meta, "status": {"podIP": ip, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize("pods, expected", [
    ([pod("m", "10.0.0.2"), pod("m", "10.0.0.1")], ("10.0.0.1:8000", "10.0.0.2:8000")),
    ([pod("m", "10.0.0.1", ready=False)], ()),
    ([pod("m", "10.0.0.1", deleting=True)], ()),
    ([pod("m", None)], ()),
    ([pod("other", "10.0.0.1")], ()),
    ([pod("m", "10.0.0.1", ns="b")], ()),
    # multi-node: only the group leader serves the API
    ([pod("m", "10.0.0.1", worker="0"), pod("m", "10.0.0.2", worker="1")], ("10.0.0.1:8000",)),
], ids=["sorted", "not-ready", "terminating", "no-ip", "other-owner", "other-namespace", "leaders-only"])
def test_endpoints_are_ready_serving_pods(pods: list[dict[str, Any]], expected: tuple[str, ...]) -> None:
    table = routes.build_table([infd("m")], pods)
    assert table.get("m").endpoints == expected


@pytest.mark.parametrize("obj, model, scale_to_zero, desired, waking", [
    (infd("m"), "m", False, 1, True),
    (infd("m", served="chat"), "chat", False, 1, True),
    (infd("m", min_replicas=0, desired=0), "m", True, 0, True),
    (infd("m", min_replicas=1, desired=0), "m", False, 0, False),
    (infd("m", replicas=0), "m", False, 0, False),
    (infd("m", replicas=0, desired=2), "m", False, 2, True),
], ids=["name", "served-name", "scale-to-zero", "scaled-down-no-autoscaling", "spec-zero", "scaling-up"])
def test_route_fields(obj: dict[str, Any], model: str, scale_to_zero: bool, desired: int, waking: bool) -> None:
    route = routes.build_table([obj], []).get(model)
    assert (route.model, route.namespace, route.name) == (model, "a", "m")
    assert (route.scale_to_zero, route.desired_replicas, route.waking) == (scale_to_zero, desired, waking)


def test_a_ready_endpoint_is_not_waking() -> None:
    route = routes.build_table([infd("m", min_replicas=0, desired=1)], [pod("m", "10.0.0.1")]).get("m")
    assert route.endpoints and not route.waking


def test_the_oldest_keeps_a_served_name_and_the_others_are_conflicts() -> None:
    objs = [infd("new", ns="b", served="chat", created="2026-03-01T00:00:00Z"),
            infd("old", ns="a", served="chat", created="2026-02-01T00:00:00Z")]
    for order in (objs, objs[::-1]):
        table = routes.build_table(order, [])
        assert (table.get("chat").namespace, table.get("chat").name) == ("a", "old")
        assert table.conflicts == ("b/new: served name 'chat' is already served by a/old",)


def test_deleting_deployments_are_not_routed_and_models_are_sorted() -> None:
    table = routes.build_table([infd("z"), infd("gone", deleting=True), infd("b")], [])
    assert [r.model for r in table.models()] == ["b", "z"]
    assert table.get("gone") is None
