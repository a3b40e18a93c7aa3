"""What enqueues a reconcile, and the plan inputs that must not move a running model."""

from shardwise.controller.manager import needs_reconcile, pod_trouble
from shardwise.controller.planning import pods_of_others


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


def test_pod_progress_is_not_trouble_but_scheduling_and_container_failures_are() -> None:
    assert pod_trouble(pod(podIP="1.2.3.4")) == pod_trouble(pod(podIP="1.2.3.5", conditions=[{"type": "Ready"}]))
    unschedulable = pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    assert pod_trouble(unschedulable) != pod_trouble(pod())
    crashing = pod(containerStatuses=[{"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 3,
                                       "lastState": {"terminated": {"reason": "OOMKilled"}}}])
    assert pod_trouble(crashing) != pod_trouble(pod(containerStatuses=[{"state": {"running": {}}}]))


def test_a_deployments_own_pods_do_not_count_against_its_plan() -> None:
    def gpu_pod(ns: str, owner: str | None) -> dict:
        labels = {"shardwise.io/inference-deployment": owner} if owner else {}
        return {"metadata": {"name": f"{ns}-{owner}", "namespace": ns, "labels": labels}}

    pods = [gpu_pod("a", "m"), gpu_pod("b", "m"), gpu_pod("a", "other"), gpu_pod("a", None)]
    assert [p["metadata"]["name"] for p in pods_of_others(pods, "a", "m")] == ["b-m", "a-other", "a-None"]
