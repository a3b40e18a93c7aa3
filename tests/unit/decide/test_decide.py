"""decide(snapshot) for the situations the e2e suite drives on the real control plane: plain data
in, the writes, status and events out; no cluster and no fake client.

Each case builds a snapshot as the shell would gather it, decides, and, where the case goes on,
plays the API server (the writes become the next snapshot's live objects) and the workload
controller (pods and workload status) by hand.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from shardwise.api import v1alpha1 as api
from shardwise.decide import modelcache, reconcile
from shardwise.decide.reconcile import Refused, Snapshot, decide
from shardwise.decide.workload_health import Failure
from shardwise.render import modelcache as mc
from shardwise.render.labels import INSTANCE_LABEL
from shardwise.rollout import workload

NS, NAME, UID = "ns", "m", "u-1"
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
SERVICE = ("v1", "Service", NAME)
DEPLOYMENT = ("apps/v1", "Deployment", NAME)
LWS = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", f"{NAME}-lws")


def node(name: str, product: str = "NVIDIA-L4", gpus: int = 1, memory_mib: int = 23034) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
              "nvidia.com/gpu.memory": str(memory_mib)}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def infd(**spec: Any) -> dict[str, Any]:
    body = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "replicas": 1,
            "serving": {"maxModelLen": 2048, "maxConcurrency": 4}, "parallelism": {"objective": "Cost"}}
    body.update(spec)
    return {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND,
            "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1, "resourceVersion": "1"},
            "spec": body}


def cache_inputs(resource: dict[str, Any], **seen: Any) -> modelcache.CacheInputs:
    spec = api.InferenceDeploymentSpec.model_validate(resource["spec"])
    return modelcache.CacheInputs(mc.resolve(spec, default_mode="None"), **seen)


def snapshot(resource: dict[str, Any], *, nodes: int = 3, children: dict[Any, Any] | None = None,
             pods: list[dict[str, Any]] | None = None, now: str = T0, **extra: Any) -> Snapshot:
    looked_up = {SERVICE: None, DEPLOYMENT: None} if children is None else children
    owned = {k: v for k, v in looked_up.items() if k[1] in ("Deployment", "LeaderWorkerSet")}
    fields: dict[str, Any] = dict(
        infd=resource, now=now, nodes=[node(f"n{i}") for i in range(nodes)], gpu_pods=list(pods or []),
        pods=list(pods or []), children=looked_up, owned_workloads=owned, lws_installed=True,
        cache=cache_inputs(resource) if isinstance(reconcile.parse_spec(resource), api.InferenceDeploymentSpec)
        else None, prices={}, learned={})
    fields.update(extra)
    return Snapshot(**fields)


def condition(status: dict[str, Any], type_: str) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == type_)
    return found["status"], found["reason"]


def written(resource: dict[str, Any], decision: reconcile.Decision) -> dict[str, Any]:
    """The resource as the API server holds it after the status write."""
    out = copy.deepcopy(resource)
    out["status"] = {**(out.get("status") or {}), **copy.deepcopy(decision.status or {})}
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


def live(decision: reconcile.Decision) -> dict[Any, Any]:
    """The applied children as the API server answers them (generation 1, no status yet)."""
    return {reconcile.key_of(a.obj): reconcile.as_applied(None, a.obj) for a in decision.apply}


def serving(children: dict[Any, Any], replicas: int, *, ready: bool = True) -> tuple[dict[Any, Any], list[Any]]:
    """The Deployment controller and kubelet at work: `replicas` pods of the current template."""
    deployment = copy.deepcopy(children[DEPLOYMENT])
    template = deployment["spec"]["template"]
    pods = [{"metadata": {"name": f"{NAME}-{i}", "namespace": NS, "uid": f"p{i}",
                          "labels": dict(template["metadata"]["labels"]),
                          "annotations": dict(template["metadata"].get("annotations") or {})},
             "spec": {**copy.deepcopy(template["spec"]), "nodeName": f"n{i}"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}
            for i in range(replicas)]
    generation = deployment["metadata"]["generation"]
    deployment["status"] = {"observedGeneration": generation, "replicas": replicas,
                            "readyReplicas": replicas if ready else 0, "updatedReplicas": replicas}
    return {**children, DEPLOYMENT: deployment}, pods


def converge(resource: dict[str, Any], replicas: int = 1) -> tuple[dict[str, Any], dict[Any, Any], list[Any]]:
    """A new resource taken to Ready: first pass, the workload runs, second pass."""
    first = decide(snapshot(resource))
    resource = written(resource, first)
    children, pods = serving(live(first), replicas)
    second = decide(snapshot(resource, children=children, pods=pods, now=T1))
    return written(resource, second), children, pods


# -- the situations ------------------------------------------------------------------------------

def test_new_resource_plans_creates_service_and_deployment_and_says_so() -> None:
    decision = decide(snapshot(infd()))
    assert [(a.obj["kind"], a.force) for a in decision.apply] == [("Deployment", False), ("Service", False)]
    status = decision.status or {}
    assert status["plan"]["feasible"] and status["phase"] == "Progressing"
    assert condition(status, "Planned") == ("True", "Planned")
    assert condition(status, "Ready") == ("False", "ReplicasNotReady")
    assert [e[1] for e in decision.events] == ["Planned"]
    assert decision.status_patch["plan"] == status["plan"]  # everything is in the one first write
    assert not decision.lookups and not decision.delete and not decision.requeue


def test_ready_when_the_workload_serves_then_an_idle_pass_writes_nothing() -> None:
    resource, children, pods = converge(infd())
    assert resource["status"]["phase"] == "Ready"
    assert condition(resource["status"], "Ready") == ("True", "Ready")
    idle = decide(snapshot(resource, children=children, pods=pods, now="2026-01-01T01:00:00Z"))
    assert (idle.apply, idle.status_patch, idle.events, idle.delete) == ((), {}, (), ())


def test_converging_takes_two_status_writes_and_two_events() -> None:
    first = decide(snapshot(infd()))
    resource = written(infd(), first)
    children, pods = serving(live(first), 1)
    second = decide(snapshot(resource, children=children, pods=pods, now=T1))
    assert [e[1] for e in first.events + second.events] == ["Planned", "Ready"]
    assert bool(first.status_patch) and bool(second.status_patch)


def test_invalid_spec_touches_nothing_and_names_the_field() -> None:
    resource = infd(serving={"maxModelLen": -5})
    decision = decide(snapshot(resource, children={}))
    assert decision.apply == ()
    assert condition(decision.status or {}, "Ready") == ("False", "InvalidSpec")
    assert "spec.serving.maxModelLen" in next(c["message"] for c in (decision.status or {})["conditions"]
                                              if c["type"] == "Ready")


def test_no_feasible_plan_creates_nothing_and_gives_the_planners_reason() -> None:
    resource = infd(model={"name": "meta-llama/Llama-3.1-70B-Instruct"}, parallelism={"objective": "Latency"})
    decision = decide(snapshot(resource, nodes=1))
    assert decision.apply == ()
    status = decision.status or {}
    assert status["phase"] == "Pending" and condition(status, "Planned")[0] == "False"
    assert [e[0] for e in decision.events] == ["Warning"]


def test_a_namesake_of_someone_else_is_a_conflict_and_nothing_is_touched() -> None:
    theirs = {"apiVersion": "v1", "kind": "Service",
              "metadata": {"name": NAME, "namespace": NS, "uid": "x", "resourceVersion": "9"}}
    decision = decide(snapshot(infd(), children={SERVICE: theirs, DEPLOYMENT: None}))
    assert decision.apply == () and decision.failure is not None
    assert decision.failure.reason == "ChildConflict" and "has no controller" in decision.failure.message
    assert condition(decision.status or {}, "Degraded") == ("True", "ChildConflict")


def test_scaling_applies_the_replica_count_and_is_not_a_rollout() -> None:
    resource, children, pods = converge(infd())
    resource["spec"]["replicas"] = 3
    resource["metadata"]["generation"] = 2
    decision = decide(snapshot(resource, children=children, pods=pods, now=T1))
    deployment = next(a.obj for a in decision.apply if a.obj["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert "rollout" not in {k for k, v in (decision.status or {}).items() if v is not None}
    assert (decision.status or {})["phase"] == "Progressing"


def test_a_template_change_rolls_out_with_a_strategy_chosen_from_the_free_gpus() -> None:
    resource, children, pods = converge(infd(replicas=3), replicas=3)
    resource["spec"]["serving"]["image"] = "vllm/vllm-openai:v0.33.0"
    resource["metadata"]["generation"] = 2
    decision = decide(snapshot(resource, nodes=3, children=children, pods=pods, now=T1))
    deployment = next(a.obj for a in decision.apply if a.obj["kind"] == "Deployment")
    chosen = workload.decision(deployment)
    assert chosen is not None and chosen.strategy == "ReplaceInPlace"  # 3 nodes, 3 replicas: no room
    status = decision.status or {}
    assert status["rollout"]["strategy"] == "ReplaceInPlace"
    assert "RolloutStarted" in [e[1] for e in decision.events]


def test_a_crashing_pod_degrades_with_its_reason() -> None:
    first = decide(snapshot(infd()))
    resource = written(infd(), first)
    children, pods = serving(live(first), 1, ready=False)
    pods[0]["status"]["containerStatuses"] = [{"name": "vllm", "restartCount": 4, "ready": False, "state": {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}}]
    decision = decide(snapshot(resource, children=children, pods=pods, now=T1))
    status = decision.status or {}
    assert status["phase"] == "Degraded" and condition(status, "Degraded") == ("True", "CrashLoopBackOff")
    assert ("Warning", "CrashLoopBackOff") in [(e[0], e[1]) for e in decision.events]


def test_an_api_refusal_decided_again_is_on_the_status() -> None:
    snap = snapshot(infd())
    first = decide(snap)
    refused = decide(snap, Refused(failure=Failure("QuotaExceeded", "Deployment m: exceeded quota: gpus"),
                                   keys=frozenset({DEPLOYMENT})))
    assert refused.status is not None and refused.status["phase"] == "Degraded"
    assert condition(refused.status, "Degraded") == ("True", "QuotaExceeded")
    assert first.status != refused.status


def test_an_uncached_model_waits_for_its_claim_before_any_serving_pod() -> None:
    resource = infd(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"mode": "Cluster"}})
    decision = decide(snapshot(resource, cache=cache_inputs(resource)))
    assert [a.obj["kind"] for a in decision.apply] == ["PersistentVolumeClaim"]
    assert decision.requeue  # the downloader Job is owned by the claim: next pass, with its uid
    status = decision.status or {}
    assert status["modelCache"]["phase"] == "Pending" and status["phase"] == "Pending"


def test_a_bound_claim_gets_its_downloader_job_and_still_no_serving_pod() -> None:
    resource = infd(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"mode": "Cluster"}})
    ref = cache_inputs(resource).ref
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"},
             "metadata": {"name": ref.claim, "namespace": NS, "uid": "c-1", "annotations": {}}}
    decision = decide(snapshot(resource, cache=cache_inputs(resource, claim=claim)))
    assert [a.obj["kind"] for a in decision.apply] == ["Job"]
    assert decision.apply[0].obj["metadata"]["ownerReferences"][0]["uid"] == "c-1"
    assert (decision.status or {})["modelCache"]["phase"] == "Downloading"


def test_a_cached_model_serves_from_the_claim() -> None:
    resource = infd(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"mode": "Cluster"}})
    ref = cache_inputs(resource).ref
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"},
             "metadata": {"name": ref.claim, "namespace": NS, "uid": "c-1", "annotations": {
                 mc.PHASE_ANNOTATION: "Ready", mc.COMMIT_ANNOTATION: "abc", mc.BYTES_ANNOTATION: "16000000000"}}}
    decision = decide(snapshot(resource, cache=cache_inputs(resource, claim=claim)))
    kinds = [a.obj["kind"] for a in decision.apply]
    assert kinds == ["Deployment", "Service"]
    volumes = decision.apply[0].obj["spec"]["template"]["spec"].get("volumes") or []
    assert any((v.get("persistentVolumeClaim") or {}).get("claimName") == ref.claim for v in volumes)
    assert condition(decision.status or {}, "ModelCached") == ("True", "Cached")


def test_a_plan_across_nodes_asks_for_its_workloads_name_first() -> None:
    resource = infd(model={"name": "meta-llama/Llama-3.1-70B-Instruct"}, parallelism={"objective": "Latency"})
    decision = decide(snapshot(resource, nodes=8))
    assert decision.lookups == (LWS,) and decision.apply == () and decision.status is None
    looked = decide(snapshot(resource, nodes=8, children={SERVICE: None, DEPLOYMENT: None, LWS: None}))
    assert [a.obj["kind"] for a in looked.apply] == ["LeaderWorkerSet", "Service"]


def test_the_replaced_workload_goes_once_the_new_one_serves_and_only_if_ours() -> None:
    resource, children, pods = converge(infd())
    ours = {"apiVersion": LWS[0], "kind": LWS[1], "metadata": {
        "name": LWS[2], "namespace": NS, "uid": "l-1", "labels": {INSTANCE_LABEL: NAME},
        "ownerReferences": [{"kind": api.KIND, "name": NAME, "uid": UID, "controller": True}]}}
    decision = decide(snapshot(resource, children={**children, LWS: ours}, pods=pods, now=T1))
    assert [d["metadata"]["uid"] for d in decision.delete] == ["l-1"]
    someone_else = {**ours, "metadata": {**ours["metadata"], "ownerReferences": []}}
    decision = decide(snapshot(resource, children={**children, LWS: someone_else}, pods=pods, now=T1))
    assert decision.delete == ()


@pytest.mark.parametrize("deleting", [True, False])
def test_a_child_being_deleted_is_not_fought(deleting: bool) -> None:
    resource, children, pods = converge(infd())
    service = copy.deepcopy(children[SERVICE])
    service["spec"]["ports"] = []  # drifted: would be re-applied
    if deleting:
        service["metadata"]["deletionTimestamp"] = T1
    decision = decide(snapshot(resource, children={**children, SERVICE: service}, pods=pods, now=T1))
    assert [a.obj["kind"] for a in decision.apply] == ([] if deleting else ["Service"])


def test_the_snapshot_is_not_changed_by_deciding() -> None:
    snap = snapshot(infd())
    before = copy.deepcopy(dataclasses.asdict(snap))
    decide(snap)
    assert dataclasses.asdict(snap) == before


def test_a_wake_up_from_zero_records_its_cold_start_once() -> None:
    from shardwise.render.labels import WAKE_ANNOTATION

    scaling = {"minReplicas": 0, "maxReplicas": 2, "allowScaleToZero": True, "slo": {"ttftP95": "2s"}}
    resource = infd(autoscaling=scaling)
    del resource["spec"]["replicas"]
    resource["metadata"]["annotations"] = {WAKE_ANNOTATION: T0}
    resource["status"] = {"desiredReplicas": 1}
    first = decide(snapshot(resource))
    assert "lastColdStart" not in ((first.status or {}).get("autoscaling") or {})  # nothing ready yet
    resource = written(resource, first)
    children, pods = serving(live(first), 1)
    ready = decide(snapshot(resource, children=children, pods=pods, now="2026-01-01T00:00:42Z"))
    cold = (ready.status or {})["autoscaling"]["lastColdStart"]
    assert cold == {"requestedAt": T0, "readyAt": "2026-01-01T00:00:42Z", "seconds": 42.0}
    again = decide(snapshot(written(resource, ready), children=children, pods=pods, now="2026-01-01T00:09:00Z"))
    assert again.status_patch == {}


def test_a_model_the_catalog_lacks_is_planned_from_its_config_and_says_where_from() -> None:
    import pathlib

    from shardwise import hub
    from shardwise.planner import hfconfig

    folder = pathlib.Path(__file__).parents[2] / "fixtures" / "hub-configs" / "Qwen" / "Qwen3-32B"
    resource = infd(model={"name": "Qwen/Qwen3-32B"}, parallelism={"objective": "Latency"})
    arch = hfconfig.resolve_architecture(resource["spec"]["model"], hub.FolderFiles(folder))
    without = decide(snapshot(resource, nodes=3))
    assert (without.status or {})["plan"]["reasonCode"] == "InvalidModel"  # no numbers, no plan
    h100s = [node(f"h{i}", "NVIDIA-H100-80GB-HBM3", 8, 81559) for i in range(2)]
    planned = decide(dataclasses.replace(snapshot(resource), nodes=h100s, architecture=arch))
    plan = (planned.status or {})["plan"]
    assert plan["feasible"], plan.get("reason")
    assert plan["architecture"]["source"] == arch.source and plan["architecture"]["layers"] == arch.layers
    refused = decide(dataclasses.replace(snapshot(resource), nodes=h100s,
                                         architecture_failure=("GatedModelNeedsToken", "401 from the hub")))
    assert condition(refused.status or {}, "Planned") == ("False", "GatedModelNeedsToken")
    assert refused.apply == ()
