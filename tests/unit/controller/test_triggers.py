"""What enqueues a reconcile, and the plan inputs that must not move a running model."""

from shardwise.decide.triggers import child_signal, needs_reconcile, pod_signal, wake_requested
from shardwise.decide.planning import pods_of_others


def infd(generation: int = 1, rv: str = "1", **meta: object) -> dict:
    return {"metadata": {"name": "m", "namespace": "ns", "generation": generation, "resourceVersion": rv, **meta},
            "status": {"phase": rv}}


def test_status_only_changes_do_not_enqueue_but_spec_annotations_and_deletion_do() -> None:
    assert needs_reconcile(None, infd())
    assert not needs_reconcile(infd(), None)
    assert not needs_reconcile(infd(rv="1"), infd(rv="2"))  # our own status write coming back
    assert needs_reconcile(infd(), infd(generation=2, rv="2"))
    assert needs_reconcile(infd(), infd(rv="2", annotations={"shardwise.io/replan": "x"}))
    assert needs_reconcile(infd(), infd(rv="2", deletionTimestamp="now"))


def pod(**status: object) -> dict:
    return {"metadata": {"name": "p"}, "status": {"phase": "Running", **status}}


def test_pod_progress_signals_nothing_but_readiness_scheduling_and_container_failures_do() -> None:
    pending = pod(phase="Pending")
    assert pod_signal(None) == pod_signal(pending), "a new pod is no news"
    scheduled = pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"}])
    started = pod(podIP="1.2.3.5", containerStatuses=[{"state": {"running": {}}}])
    assert pod_signal(pending) == pod_signal(scheduled) == pod_signal(started), "normal progress"
    ready = pod(conditions=[{"type": "Ready", "status": "True"}])
    assert pod_signal(ready) != pod_signal(started), "readiness is read ahead of the workload's status"
    assert pod_signal(None) != pod_signal(ready), "a ready pod went away"
    unschedulable = pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    assert pod_signal(unschedulable) != pod_signal(pending)
    crashing = pod(containerStatuses=[{"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 3,
                                       "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}])
    assert pod_signal(crashing)[0] == "CrashLoopBackOff" and pod_signal(crashing) != pod_signal(started)
    crashed_again = pod(containerStatuses=[{"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 4,
                                            "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}])
    assert pod_signal(crashed_again) == pod_signal(crashing), "one more restart is the same trouble"
    assert pod_signal(pod(phase="Failed")) != pod_signal(started)


def test_a_deployments_own_pods_do_not_count_against_its_plan() -> None:
    def gpu_pod(ns: str, owner: str | None) -> dict:
        labels = {"shardwise.io/inference-deployment": owner} if owner else {}
        return {"metadata": {"name": f"{ns}-{owner}", "namespace": ns, "labels": labels}}

    pods = [gpu_pod("a", "m"), gpu_pod("b", "m"), gpu_pod("a", "other"), gpu_pod("a", None)]
    assert [p["metadata"]["name"] for p in pods_of_others(pods, "a", "m")] == ["b-m", "a-other", "a-None"]


def deployment(rv: str, annotations: dict | None = None, **status: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m", "resourceVersion": rv, "generation": 1, "annotations": annotations or {}},
            "spec": {"replicas": 1}, "status": status}


def test_a_childs_status_updates_reconcile_only_when_they_change_what_status_reads() -> None:
    created = deployment("1")
    counted = deployment("2", observedGeneration=1, replicas=1, updatedReplicas=1, conditions=[
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"},
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}])
    assert child_signal(counted) != child_signal(created)
    progressing = deployment("3", {"deployment.kubernetes.io/revision": "1"}, observedGeneration=1, replicas=1,
                             updatedReplicas=1, conditions=[{"type": "Progressing", "status": "True",
                                                             "reason": "ReplicaSetUpdated"}])
    assert child_signal(progressing) == child_signal(counted), "the controller's bookkeeping is no news"
    ready = deployment("4", observedGeneration=1, replicas=1, updatedReplicas=1, readyReplicas=1)
    assert child_signal(ready) != child_signal(progressing)
    stuck = deployment("5", observedGeneration=1, replicas=1, updatedReplicas=1, conditions=[
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "timed out"}])
    assert child_signal(stuck) != child_signal(counted)
    quota = deployment("6", observedGeneration=1, conditions=[
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}])
    assert child_signal(quota) != child_signal(deployment("6", observedGeneration=1))
    edited = deployment("7")
    edited["spec"] = {"replicas": 3}
    assert child_signal(edited) != child_signal(created), "drift is corrected"
    touched = deployment("8", {"team": "x"})
    assert child_signal(touched) != child_signal(created)
    assert child_signal(None) != child_signal(created), "created or deleted"


def test_the_autoscaler_hears_each_new_wake_request_once() -> None:
    def infd(wake: str | None) -> dict:
        return {"metadata": {"name": "m", "annotations": {"shardwise.io/wake-requested": wake} if wake else {}}}
    assert wake_requested(None, infd("t1"))
    assert wake_requested(infd(None), infd("t1"))
    assert wake_requested(infd("t1"), infd("t2"))
    assert not wake_requested(infd("t1"), infd("t1"))
    assert not wake_requested(infd(None), infd(None))
