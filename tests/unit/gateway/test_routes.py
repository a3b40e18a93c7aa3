"""The model table from InferenceDeployments and pods as plain dicts."""

from __future__ import annotations

from typing import Any

import pytest

from shardwise.gateway.decide import routes


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
        worker: str | None = None, role: str | None = None) -> dict[str, Any]:
    labels = {routes.INSTANCE_LABEL: owner}
    if worker is not None:
        labels[routes.WORKER_INDEX_LABEL] = worker
    if role is not None:
        labels[routes.ROLE_LABEL] = role
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
    # disaggregated: callers reach the decode engines, which prefill themselves without a hand-off
    ([pod("m", "10.0.0.1", role="prefill"), pod("m", "10.0.0.2", role="decode")], ("10.0.0.2:8000",)),
], ids=["sorted", "not-ready", "terminating", "no-ip", "other-owner", "other-namespace", "leaders-only",
        "decode-only"])
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


# -- LoRA adapters ------------------------------------------------------------------------------

def with_adapters(obj: dict[str, Any], *names: str, status: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj["spec"]["adapters"] = [{"name": n, "source": {"repo": f"org/{n}"}} for n in names]
    if status is not None:
        obj["status"]["adapters"] = status
    return obj


def loading(p: dict[str, Any], *adapters: str) -> dict[str, Any]:
    p["metadata"]["annotations"] = {routes.LOADED_ADAPTERS_ANNOTATION: ",".join(adapters)}
    return p


def test_an_adapter_goes_only_to_the_replicas_of_its_base_that_have_it_loaded() -> None:
    table = routes.build_table([with_adapters(infd("m"), "sql", "chat")],
                               [loading(pod("m", "10.0.0.1"), "sql"), loading(pod("m", "10.0.0.2"), "sql", "chat"),
                                pod("m", "10.0.0.3")])
    assert table.get("m").endpoints == ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
    sql, chat = table.get("sql"), table.get("chat")
    assert sql.endpoints == ("10.0.0.1:8000", "10.0.0.2:8000") and sql.base == "m" and sql.name == "m"
    assert chat.endpoints == ("10.0.0.2:8000",)
    assert table.get("m").base is None


def test_an_adapter_no_replica_has_yet_is_held_like_a_waking_model() -> None:
    table = routes.build_table([with_adapters(infd("m", desired=1), "sql")], [pod("m", "10.0.0.1")])
    route = table.get("sql")
    assert route.endpoints == () and route.waking and route.unavailable is None


def test_an_adapter_that_cannot_load_carries_the_reason_from_the_status() -> None:
    failed = [{"name": "big", "reason": "RankAboveLimit", "message": "rank 16 is above maxLoraRank 8"},
              {"name": "sql", "reason": "Loading", "message": "loading on 1 replica"}]
    table = routes.build_table([with_adapters(infd("m", desired=1), "big", "sql", status=failed)],
                               [pod("m", "10.0.0.1")])
    assert table.get("big").unavailable == "rank 16 is above maxLoraRank 8"
    assert table.get("sql").unavailable is None
    # Loaded somewhere after all (the status lags the pods): served, the stale reason ignored.
    table = routes.build_table([with_adapters(infd("m", desired=1), "big", status=failed)],
                               [loading(pod("m", "10.0.0.1"), "big")])
    assert table.get("big").endpoints == ("10.0.0.1:8000",) and table.get("big").unavailable is None


def test_a_base_model_name_wins_over_an_adapter_of_the_same_name_whatever_the_age() -> None:
    old = with_adapters(infd("old", created="2026-01-01T00:00:00Z"), "young")
    young = infd("young", created="2026-02-01T00:00:00Z")
    table = routes.build_table([young, old], [loading(pod("old", "10.0.0.1"), "young"), pod("young", "10.0.0.2")])
    assert table.get("young").endpoints == ("10.0.0.2:8000",) and table.get("young").base is None
    assert table.conflicts == ("a/old: adapter name 'young' is already served by a/young",)


def test_two_deployments_with_one_adapter_name_the_older_keeps_it() -> None:
    first = with_adapters(infd("first", created="2026-01-01T00:00:00Z"), "sql")
    second = with_adapters(infd("second", created="2026-02-01T00:00:00Z"), "sql")
    table = routes.build_table([second, first], [loading(pod("first", "10.0.0.1"), "sql"),
                                                 loading(pod("second", "10.0.0.2"), "sql")])
    assert table.get("sql").name == "first"
    assert table.conflicts == ("a/second: adapter name 'sql' is already served by a/first",)


def test_the_annotation_is_read_leniently() -> None:
    assert routes.loaded_adapters(loading(pod("m", "1"), " a ", "", "b")) == {"a", "b"}
    assert routes.loaded_adapters(pod("m", "1")) == frozenset()
