"""One reconcile with LoRA adapters: their downloads beside the model's, status.adapters and
AdaptersReady from what the engines serve, and no pod template change when the list changes."""

from __future__ import annotations

import json
from typing import Any

from shardwise.decide import adaptercache as ac
from shardwise.decide import adapters
from shardwise.decide.reconcile import decide
from shardwise.render import modelcache as mc
from tests.unit.decide.test_decide import (DEPLOYMENT, NS, cache_inputs, condition, converge, infd, live, serving,
                                           snapshot, written)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SQL = {"name": "sql", "source": {"repo": "org/sql-lora", "revision": "v1"}, "rank": 8}


def cached(**annotations: str) -> dict[str, Any]:
    resource = infd(model={"name": MODEL, "cache": {"mode": "Cluster"}})
    ref = cache_inputs(resource).ref
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"},
            "metadata": {"name": ref.claim, "namespace": NS, "uid": "c-1", "annotations": {
                mc.PHASE_ANNOTATION: "Ready", mc.COMMIT_ANNOTATION: "abc", mc.BYTES_ANNOTATION: "16000000000",
                **annotations}}}


def addressed(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, pod in enumerate(pods):
        pod["status"]["podIP"] = f"10.0.0.{i + 1}"
    return pods


def with_adapters(*items: dict[str, Any]) -> dict[str, Any]:
    return infd(model={"name": MODEL, "cache": {"mode": "Cluster"}}, lora={}, adapters=list(items))


def test_a_hub_adapter_is_downloaded_into_the_models_claim_and_reads_as_downloading() -> None:
    resource = with_adapters(SQL)
    claim = cached()
    decision = decide(snapshot(resource, cache=cache_inputs(resource, claim=claim)))
    jobs = [a.obj for a in decision.apply if a.obj["kind"] == "Job"]
    (job,) = jobs
    assert job["metadata"]["labels"][ac.JOB_LABEL] == ac.Source("sql", "org/sql-lora", "v1").key
    assert job["metadata"]["ownerReferences"][0]["uid"] == "c-1"
    (entry,) = (decision.status or {})["adapters"]
    assert entry["reason"] == "Downloading"
    assert condition(decision.status or {}, "AdaptersReady") == ("False", "AdaptersLoading")
    assert not [e for e in decision.events if e[1] == "AdaptersLoading"]  # waiting is no event


def test_a_verified_download_is_stamped_and_then_loaded_by_the_engines_not_the_template() -> None:
    source = ac.Source("sql", "org/sql-lora", "v1")
    resource = with_adapters(SQL)
    done = [{"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"message": json.dumps({"state": "Complete", "verified": True, "commit": "f00d"})}}}]}}]
    job = {"metadata": {"name": ac.job_name(cached()["metadata"]["name"], source)},
           "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    decision = decide(snapshot(resource, cache=cache_inputs(resource, claim=cached(), adapter_jobs={source.key: job},
                                                            adapter_pods={source.key: tuple(done)})))
    assert any(patch == {"annotations": {ac.ANNOTATION_PREFIX + source.key: "f00d"}} for _, patch in decision.annotate)
    assert (decision.status or {})["adapters"][0]["commit"] == "f00d"


def test_status_follows_the_engines_and_adding_an_adapter_changes_no_pod() -> None:
    stamp = {ac.ANNOTATION_PREFIX + ac.Source("sql", "org/sql-lora", "v1").key: "f00d"}
    resource = with_adapters(SQL)
    first = decide(snapshot(resource, cache=cache_inputs(resource, claim=cached(**stamp))))
    resource = written(resource, first)
    children, pods = serving(live(first), 2)
    addressed(pods)
    pods[0]["metadata"]["annotations"][adapters.LOADED_ANNOTATION] = "sql"
    second = decide(snapshot(resource, children=children, pods=pods,
                             cache=cache_inputs(resource, claim=cached(**stamp))))
    (entry,) = (second.status or {})["adapters"]
    assert (entry["loadedReplicas"], entry["replicas"], entry["reason"]) == (1, 2, "Loading")
    for pod in pods:
        pod["metadata"]["annotations"][adapters.LOADED_ANNOTATION] = "sql"
    resource = written(resource, second)
    third = decide(snapshot(resource, children=children, pods=pods, cache=cache_inputs(resource, claim=cached(**stamp))))
    assert condition(third.status or {}, "AdaptersReady") == ("True", "AdaptersLoaded")
    assert [e[1] for e in third.events if e[1].startswith("Adapters")] == ["AdaptersLoaded"]
    # A second adapter: no workload write (the template holds no adapter list), a download instead.
    grown = {**resource, "spec": {**resource["spec"], "adapters": [SQL, {"name": "chat", "source": {"path": "chat"}}]}}
    fourth = decide(snapshot(grown, children=children, pods=pods, cache=cache_inputs(grown, claim=cached(**stamp))))
    assert not [a for a in fourth.apply if a.obj["kind"] == "Deployment"]
    chat = next(e for e in (fourth.status or {})["adapters"] if e["name"] == "chat")
    assert chat["reason"] == "Loading"  # a path in the claim: ready for the engines at once


def test_a_refused_adapter_is_its_reason_once_and_removing_adapters_clears_the_status() -> None:
    stamp = {ac.ANNOTATION_PREFIX + ac.Source("sql", "org/sql-lora", "v1").key: "f00d"}
    resource = with_adapters(SQL)
    first = decide(snapshot(resource, cache=cache_inputs(resource, claim=cached(**stamp))))
    resource = written(resource, first)
    children, pods = serving(live(first), 1)
    addressed(pods)
    refusal = adapters.annotations([], {"sql": adapters.Failure("RankAboveLimit", "rank 64 > 16", "/p")})
    pods[0]["metadata"]["annotations"].update({k: v for k, v in refusal.items() if v})
    second = decide(snapshot(resource, children=children, pods=pods, cache=cache_inputs(resource, claim=cached(**stamp))))
    assert condition(second.status or {}, "AdaptersReady") == ("False", "RankAboveLimit")
    assert [(e[0], e[1]) for e in second.events if e[1] == "RankAboveLimit"] == [("Warning", "RankAboveLimit")]
    resource = written(resource, second)
    again = decide(snapshot(resource, children=children, pods=pods, cache=cache_inputs(resource, claim=cached(**stamp))))
    assert not [e for e in again.events if e[1] == "RankAboveLimit"]  # one event per transition
    bare = {**resource, "spec": {k: v for k, v in resource["spec"].items() if k != "adapters"}}
    cleared = decide(snapshot(bare, children=children, pods=pods, cache=cache_inputs(bare, claim=cached(**stamp))))
    status = cleared.status or {}
    assert not status.get("adapters") and cleared.status_patch["adapters"] is None
    assert not [c for c in status["conditions"] if c["type"] == "AdaptersReady"]


def test_an_adapter_name_another_deployment_serves_is_a_conflict_for_the_younger_one() -> None:
    from tests.unit.decide.test_decide import T0, T1

    def other(name: str, created: str, served: str | None = None, adapters: list[str] = ()) -> dict[str, Any]:
        spec: dict[str, Any] = {"model": {"name": MODEL, **({"servedName": served} if served else {})},
                                "adapters": [{"name": a, "source": {"path": a}} for a in adapters]}
        return {"metadata": {"name": name, "namespace": NS, "creationTimestamp": created}, "spec": spec}

    own = other("m", T1, adapters=["chat", "sql", "mine"])
    older = [other("a", T0, served="chat"), other("b", T0, adapters=["sql"])]
    found = adapters.name_conflicts(own, older)
    assert set(found) == {"chat", "sql"}
    assert "base model of a" in found["chat"] and "an adapter of b" in found["sql"]
    younger = [other("c", "2027-01-01T00:00:00Z", adapters=["mine"])]
    assert adapters.name_conflicts(own, younger) == {}  # the older deployment keeps its name
    assert set(adapters.name_conflicts(younger[0], [own])) == {"mine"}

    resource = {**with_adapters(SQL), "metadata": {**with_adapters(SQL)["metadata"], "creationTimestamp": T1}}
    decision = decide(snapshot(resource, cache=cache_inputs(resource, claim=cached()), neighbours=tuple(older)))
    entry = next(e for e in (decision.status or {})["adapters"] if e["name"] == "sql")
    assert entry["reason"] == adapters.NAME_CONFLICT
    assert condition(decision.status or {}, "AdaptersReady") == ("False", adapters.NAME_CONFLICT)


def test_the_rank_the_download_found_sizes_the_engines_limit() -> None:
    source = ac.Source("sql", "org/sql-lora", "v1")
    unranked = {"name": "sql", "source": {"repo": "org/sql-lora", "revision": "v1"}}
    resource = infd(model={"name": MODEL, "cache": {"mode": "Cluster"}}, lora={}, adapters=[unranked])
    done = [{"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"message": json.dumps({"state": "Complete", "verified": True, "commit": "f00d",
                                                         "loraRank": 64})}}}]}}]
    job = {"metadata": {"name": ac.job_name(cached()["metadata"]["name"], source)},
           "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    first = decide(snapshot(resource, cache=cache_inputs(resource, claim=cached(), adapter_jobs={source.key: job},
                                                         adapter_pods={source.key: tuple(done)})))
    (stamp,) = [patch for _, patch in first.annotate if ac.ANNOTATION_PREFIX + source.key in patch["annotations"]]
    assert stamp["annotations"][ac.ANNOTATION_PREFIX + source.key + ac.RANK_SUFFIX] == "64"
    stamped = cached(**stamp["annotations"])
    second = decide(snapshot(resource, cache=cache_inputs(resource, claim=stamped)))
    (deployment,) = [a.obj for a in second.apply if a.obj["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-lora-rank") + 1] == "64"
    assert "rank 64" in (second.status or {})["plan"]["reason"]
