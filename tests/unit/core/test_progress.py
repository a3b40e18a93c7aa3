"""Status derivation: same inputs give the same dict; conditions tell the truth about the workload."""

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import progress
from shardwise.render.children import Owner

OWNER = Owner(name="m", namespace="ns", uid="u1")
PLAN = {"feasible": True, "tensorParallel": 1, "pipelineParallel": 1, "gpusPerNode": 1, "nodesPerReplica": 1,
        "gpuProduct": "NVIDIA-L40S", "reason": "fits on one GPU", "reasonCode": "Planned"}


def spec(**extra) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"name": "m"}, **extra})


def deployment(replicas: int, ready: int, updated: int | None = None, generation: int = 1,
               observed: int = 1) -> dict:
    return {"metadata": {"generation": generation},
            "status": {"replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": replicas if updated is None else updated, "observedGeneration": observed}}


def build(spec_=None, plan=PLAN, workload=None, pods=(), status=None, now="t1"):
    return progress.build_status(spec_ or spec(), plan, workload, list(pods), status or {}, owner=OWNER,
                                 generation=3, now=now)


def conds(status: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_ready_when_every_replica_is_updated_and_ready() -> None:
    status = build(spec(replicas=2), workload=deployment(2, 2))
    assert status["phase"] == "Ready" and status["readyReplicas"] == 2
    assert conds(status)["Ready"] == ("True", "Ready")
    assert conds(status)["Progressing"] == ("False", "RolloutComplete")
    assert status["endpoint"] == "http://m.ns.svc:8000/v1"
    assert status["selector"] == "shardwise.io/inference-deployment=m"
    assert status["observedGeneration"] == 3


def test_progressing_while_the_deployment_has_not_caught_up() -> None:
    for workload in (deployment(2, 1), deployment(2, 2, updated=1), deployment(2, 2, generation=2, observed=1)):
        status = build(spec(replicas=2), workload=workload)
        assert status["phase"] == "Progressing", workload
        assert conds(status)["Ready"][0] == "False"


def ready_pod(name: str, ready: bool = True, terminating: bool = False) -> dict:
    meta = {"name": name, **({"deletionTimestamp": "2026-12-01T00:00:00Z"} if terminating else {})}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_readiness_is_read_from_the_pods_ahead_of_the_deployment_controller() -> None:
    workload = {**deployment(2, 1), "kind": "Deployment"}  # the controller has not seen the 2nd pod ready
    status = build(spec(replicas=2), workload=workload, pods=[ready_pod("a"), ready_pod("b")])
    assert status["phase"] == "Ready" and status["readyReplicas"] == 2


def test_pods_do_not_count_where_they_may_be_of_an_older_template_or_going_away() -> None:
    both = [ready_pod("a"), ready_pod("b")]
    cases = {
        "generation not observed yet": ({**deployment(2, 1, generation=2, observed=1), "kind": "Deployment"}, both),
        "not every replica updated": ({**deployment(2, 1, updated=1), "kind": "Deployment"}, both),
        "a third pod (an old one) exists": ({**deployment(2, 1), "kind": "Deployment"}, both + [ready_pod("old")]),
        "one is terminating": ({**deployment(2, 1), "kind": "Deployment"},
                               [ready_pod("a"), ready_pod("b", terminating=True)]),
        "one is not ready": ({**deployment(2, 1), "kind": "Deployment"}, [ready_pod("a"), ready_pod("b", False)]),
        "a LeaderWorkerSet counts its groups": ({**deployment(2, 1), "kind": "LeaderWorkerSet"}, both),
    }
    for why, (workload, pods) in cases.items():
        status = build(spec(replicas=2), workload=workload, pods=pods)
        assert status["phase"] != "Ready" and status["readyReplicas"] == 1, why


def test_unschedulable_pod_degrades_with_the_schedulers_words() -> None:
    pod = {"metadata": {"name": "m-1"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."}]}}
    status = build(workload=deployment(1, 0), pods=[pod])
    assert status["phase"] == "Degraded"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "Insufficient nvidia.com/gpu" in degraded["message"]


def test_infeasible_plan_is_pending_with_the_planners_reason() -> None:
    plan = {"feasible": False, "reasonCode": "InsufficientGPUMemory", "reason": "needs 810 GiB, 384 GiB exist"}
    status = build(plan=plan)
    assert status["phase"] == "Pending"
    assert conds(status)["Planned"] == ("False", "InsufficientGPUMemory")
    assert "810 GiB" in next(c for c in status["conditions"] if c["type"] == "Planned")["message"]


def test_same_inputs_same_status_and_transition_time_is_kept() -> None:
    first = build(workload=deployment(1, 1), now="t1")
    again = build(workload=deployment(1, 1), status=first, now="t2")
    assert again == first


def test_autoscaling_owns_the_replica_count_within_its_bounds() -> None:
    autoscaled = spec(replicas=1, autoscaling={"minReplicas": 2, "maxReplicas": 4, "slo": {"ttftP95": "1s"}})
    assert progress.desired_replicas(autoscaled, {}) == 2
    assert progress.desired_replicas(autoscaled, {"desiredReplicas": 3}) == 3
    assert progress.desired_replicas(autoscaled, {"desiredReplicas": 9}) == 4
    assert progress.desired_replicas(spec(replicas=5), {"desiredReplicas": 3}) == 5


def test_scaled_to_zero_is_ready() -> None:
    status = build(spec(replicas=0), workload=deployment(0, 0))
    assert status["phase"] == "Ready" and conds(status)["Ready"] == ("True", "ScaledToZero")


def test_kstatus_reads_reconciling_while_rolling_and_stalled_when_a_person_must_act() -> None:
    rolling = conds(build(spec(replicas=2), workload=deployment(2, 1)))
    assert rolling["Reconciling"][0] == "True" and rolling["Stalled"][0] == "False"
    done = conds(build(workload=deployment(1, 1)))
    assert done["Reconciling"][0] == "False" and done["Stalled"][0] == "False"
    stuck = conds(build(plan={"feasible": False, "reasonCode": "InsufficientGPUMemory", "reason": "x"}))
    assert stuck["Stalled"] == ("True", "InsufficientGPUMemory")


def test_leaderworkerset_rollout_state_comes_from_its_conditions() -> None:
    multi = {**PLAN, "nodesPerReplica": 2, "gpusPerNode": 8}
    lws = {"kind": "LeaderWorkerSet", "metadata": {"generation": 4},
           "status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                      "conditions": [{"type": "Available", "status": "True"}]}}
    status = build(plan=multi, workload=lws)
    assert status["phase"] == "Ready"
    assert status["selector"].endswith("leaderworkerset.sigs.k8s.io/worker-index=0")
    rolling = {**lws, "status": {**lws["status"], "conditions": [{"type": "UpdateInProgress", "status": "True"}]}}
    assert build(plan=multi, workload=rolling)["phase"] == "Progressing"
