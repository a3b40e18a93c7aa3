"""Workload and pod failures read as one stable reason with the controller's or kubelet's words."""

from shardwise.decide import progress
from shardwise.decide.workload_health import Failure, pod_failure, unschedulable, workload_failure
from shardwise.render.children import Owner

from tests.unit.core.test_progress import PLAN, deployment, spec


def pod(name: str, *containers: dict, init: tuple = (), deleting: bool = False, conditions=()) -> dict:
    meta = {"name": name, **({"deletionTimestamp": "t"} if deleting else {})}
    return {"metadata": meta, "status": {"containerStatuses": list(containers), "initContainerStatuses": list(init),
                                         "conditions": list(conditions)}}


def container(*, ready=False, restarts=0, waiting=None, message="", terminated=None, last=None, name="vllm") -> dict:
    state = {}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": message}
    elif terminated:
        state["terminated"] = terminated
    else:
        state["running"] = {"startedAt": "t"}
    return {"name": name, "ready": ready, "restartCount": restarts, "state": state,
            "lastState": {"terminated": last} if last else {}}


def with_conditions(workload: dict, *conds: dict) -> dict:
    workload = {**workload, "kind": "Deployment"}
    workload["metadata"] = {**workload["metadata"], "name": "m"}
    workload["status"] = {**workload["status"], "conditions": list(conds)}
    return workload


def test_quota_is_read_from_replica_failure() -> None:
    failure = workload_failure(with_conditions(deployment(1, 0), {
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
        "message": 'pods "m-7d9-x" is forbidden: exceeded quota: zero, requested: pods=1, used: pods=0, limited: pods=0'}))
    assert failure and failure.reason == "QuotaExceeded" and "limited: pods=0" in failure.message


def test_a_quota_with_usage_not_yet_computed_is_a_quota_refusal() -> None:
    failure = workload_failure(with_conditions(deployment(1, 0), {
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
        "message": 'pods "m-7d9-x" is forbidden: status unknown for quota: zero, resources: pods'}))
    assert failure and failure.reason == "QuotaExceeded" and "status unknown for quota: zero" in failure.message


def test_other_replica_failures_keep_the_admission_message() -> None:
    failure = workload_failure(with_conditions(deployment(1, 0), {
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "denied by policy x"}))
    assert failure == Failure("ReplicaFailure", "Deployment m cannot create pods: denied by policy x")


def test_progress_deadline() -> None:
    failure = workload_failure(with_conditions(deployment(1, 0), {
        "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "m-1" has timed out progressing.'}))
    assert failure and failure.reason == "ProgressDeadlineExceeded" and "timed out" in failure.message


def test_a_progressing_deployment_is_no_failure() -> None:
    assert workload_failure(with_conditions(deployment(1, 0), {
        "type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"})) is None
    assert workload_failure(None) is None


def test_image_pull_failures_read_as_one_reason_whichever_the_kubelet_shows() -> None:
    for waiting in ("ErrImagePull", "ImagePullBackOff"):
        failure = pod_failure([pod("m-1", container(waiting=waiting, message='Back-off pulling image "x"'))])
        assert failure and failure.reason == "ImagePullBackOff"
        assert 'pod m-1 container vllm: ImagePullBackOff: Back-off pulling image "x"' == failure.message


def test_crash_loop_names_restarts_and_the_last_exit() -> None:
    failing = container(waiting="CrashLoopBackOff", restarts=5, last={"reason": "Error", "exitCode": 1})
    failure = pod_failure([pod("m-1", failing)])
    assert failure and failure.reason == "CrashLoopBackOff"
    assert "5 restarts, last exit Error (code 1)" in failure.message


def test_crash_loop_holds_between_back_offs() -> None:
    running_again = container(restarts=4, last={"reason": "Error", "exitCode": 1})
    assert pod_failure([pod("m-1", running_again)]).reason == "CrashLoopBackOff"
    # one restart while loading is not yet a loop
    assert pod_failure([pod("m-1", container(restarts=1, last={"reason": "Error", "exitCode": 1}))]) is None


def test_oom_kill_wins_over_the_crash_loop_it_causes() -> None:
    oom = container(waiting="CrashLoopBackOff", restarts=2, last={"reason": "OOMKilled", "exitCode": 137})
    image = container(waiting="ImagePullBackOff", name="other")
    failure = pod_failure([pod("m-1", image), pod("m-2", oom)])
    assert failure and failure.reason == "OOMKilled" and "pod m-2" in failure.message and "137" in failure.message


def test_many_pods_are_counted() -> None:
    pods = [pod(f"m-{i}", container(waiting="ImagePullBackOff")) for i in range(3)]
    assert pod_failure(pods).message.endswith("(and 2 more)")


def test_ready_terminating_and_starting_pods_are_fine() -> None:
    assert pod_failure([pod("m-1", container(ready=True, restarts=9, last={"reason": "OOMKilled"}))]) is None
    assert pod_failure([pod("m-1", container(waiting="ImagePullBackOff"), deleting=True)]) is None
    assert pod_failure([pod("m-1", container(waiting="ContainerCreating"))]) is None
    assert pod_failure([pod("m-1", init=(container(waiting="CreateContainerConfigError",
                                                   message='secret "hf" not found'),))]).reason == \
        "CreateContainerConfigError"


def test_unschedulable_keeps_the_schedulers_words() -> None:
    p = pod("m-1", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                "message": "0/5 nodes are available."}])
    assert unschedulable([p]) == Failure("Unschedulable", "pod m-1 cannot be scheduled: 0/5 nodes are available.")


def test_a_failure_stalls_the_status_with_its_reason_and_the_counts() -> None:
    pods = [pod("m-1", container(waiting="ImagePullBackOff", message="no such image"))]
    status = progress.build_status(spec(), PLAN, deployment(1, 0), pods, {}, owner=Owner("m", "ns", "u"),
                                   generation=1, now="t")
    got = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert got["Degraded"] == got["Stalled"] == ("True", "ImagePullBackOff")
    assert got["Ready"] == got["Progressing"] == got["Reconciling"] == ("False", "ImagePullBackOff")
    assert status["phase"] == "Degraded"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert "no such image" in degraded["message"] and "0/1 replicas ready" in degraded["message"]


def test_a_ready_workload_reports_no_failure() -> None:
    pods = [pod("m-1", container(waiting="ImagePullBackOff"))]
    status = progress.build_status(spec(), PLAN, deployment(1, 1), pods, {}, owner=Owner("m", "ns", "u"),
                                   generation=1, now="t")
    assert status["phase"] == "Ready"
