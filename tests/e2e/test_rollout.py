"""GPU-aware rollouts end to end: a spec edit rolls out by surging when a replica's GPUs are free,
by replacing one replica at a time when they are not, waits (policy Wait) for a single replica
until GPUs are freed, and stops with RolloutFailed on an image that cannot be pulled, the old
replicas serving, until the spec is reverted.

Each test brings its own GPU nodes: 1-GPU NVIDIA-L4 nodes labelled and tainted for its namespace,
so how full they are is the test's alone (the session's shared nodes and other tests' pods never
land there). Pods and the InferenceDeployment are recorded with watches, so "never fewer than N
ready" is checked on every change the API server made, not on samples. kwok makes pods ready at
once; its images kwok.shardwise.invalid/* fail as a kubelet would (devcluster/kwok-pod-stages.yaml).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from shardwise.devcluster import topology
from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import Kubectl, eventually

pytestmark = pytest.mark.e2e

POOL_LABEL = "shardwise-test/pool"
OLD_IMAGE = "vllm/vllm-openai:v0.32.0"
NEW_IMAGE = "vllm/vllm-openai:v0.32.1"
INSTANCE = "shardwise.io/inference-deployment"


def manifest(name: str, pool: str, replicas: int, *, when_no_room: str = "ReplaceInPlace",
             image: str = OLD_IMAGE) -> str:
    body = {
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "serving": {"maxModelLen": 2048, "maxConcurrency": 4, "image": image},
            "parallelism": {"objective": "Cost"},
            "placement": {"nodeSelector": {POOL_LABEL: pool},
                          "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": pool,
                                           "effect": "NoSchedule"}]},
            "replicas": replicas,
            "rollout": {"whenNoRoom": when_no_room},
        },
    }
    return yaml.safe_dump(body)


@pytest.fixture
def gpu_pool(cluster: LocalCluster, namespace: str) -> Iterator[Callable[[int], list[str]]]:
    """Adds 1-GPU L4 nodes only this namespace's deployments may use; removes them afterwards."""
    made: list[str] = []

    def add(count: int) -> list[str]:
        group = {"namePrefix": f"{namespace}-l4-", "count": len(made) + count,
                 "gpu": {"product": "NVIDIA-L4", "count": 1, "memoryMiB": 23034, "family": "ada-lovelace"},
                 "topology": {"interconnect": "pcie", "nvlinkDomainSize": 1},
                 "labels": {POOL_LABEL: namespace},
                 "taints": [{"key": POOL_LABEL, "value": namespace, "effect": "NoSchedule"}]}
        nodes = topology.node_objects([group])[len(made):]
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(nodes))
        names = [n["metadata"]["name"] for n in nodes]
        made.extend(names)

        def ready() -> bool:
            items = json.loads(cluster.kubectl("get", "nodes", "-l", f"{POOL_LABEL}={namespace}",
                                               "-o", "json").stdout)["items"]
            up = {n["metadata"]["name"] for n in items if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}
            return set(names) <= up

        eventually(ready, timeout=60, what=f"nodes {names} Ready")
        return names

    try:
        yield add
    finally:
        for name in made:
            cluster.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)


class Recorder:
    """Every version of the watched objects, in the API server's order, from a list-then-watch."""

    def __init__(self, list_call: Callable[..., Any], *, to_dict: Callable[[Any], dict[str, Any]], **query: Any):
        self._list, self._to_dict, self._query = list_call, to_dict, query
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.history: list[tuple[str, dict[str, Any]]] = []
        self.errors: list[BaseException] = []
        self._listed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)

    def __enter__(self) -> "Recorder":
        self._thread.start()
        eventually(self._listed.is_set, timeout=30, what="the first list")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self._list(**self._query)
                    if not isinstance(listed, dict):  # a typed list (pods): as the API server sent it
                        listed = self._to_dict(listed)
                    version = listed["metadata"]["resourceVersion"]
                    items = listed["items"]
                    with self._lock:
                        # A relist (after 410 Gone) is a fresh snapshot: what it lacks was deleted meanwhile.
                        present = {i["metadata"]["name"] for i in items}
                        self.history.extend(("DELETED", o) for o in self._current().values()
                                            if o["metadata"]["name"] not in present)
                        self.history.extend(("LISTED", i) for i in items)
                    self._listed.set()
                stream = watch.Watch().stream(self._list, resource_version=version, timeout_seconds=5,
                                              allow_watch_bookmarks=False, **self._query)
                for event in stream:
                    if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                        version = None
                        break
                    obj = self._to_dict(event["object"])
                    version = obj["metadata"]["resourceVersion"]
                    with self._lock:
                        self.history.append((event["type"], obj))
                    if self._stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status == 410:
                    version = None  # too old: list again (a relist is a fresh snapshot)
                    continue
                self.errors.append(exc)
                self._stop.wait(1)
            except Exception as exc:  # noqa: BLE001 - reported by the test that reads history
                self.errors.append(exc)
                self._stop.wait(1)

    def _current(self) -> dict[str, dict[str, Any]]:
        objects: dict[str, dict[str, Any]] = {}
        for kind, obj in self.history:
            if kind == "DELETED":
                objects.pop(obj["metadata"]["name"], None)
            else:
                objects[obj["metadata"]["name"]] = obj
        return objects

    def snapshot(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return list(self.history)


def api_clients(cluster: LocalCluster) -> tuple[client.CoreV1Api, client.CustomObjectsApi]:
    api = config.new_client_from_config(str(cluster.kubeconfig))
    return client.CoreV1Api(api), client.CustomObjectsApi(api)


def watch_pods(cluster: LocalCluster, namespace: str, name: str) -> Recorder:
    core, _ = api_clients(cluster)
    return Recorder(core.list_namespaced_pod, to_dict=core.api_client.sanitize_for_serialization,
                    namespace=namespace, label_selector=f"{INSTANCE}={name}")


def watch_infd(cluster: LocalCluster, namespace: str, name: str) -> Recorder:
    _, custom = api_clients(cluster)
    return Recorder(custom.list_namespaced_custom_object, to_dict=lambda o: o, group="shardwise.io",
                    version="v1alpha1", namespace=namespace, plural="inferencedeployments",
                    field_selector=f"metadata.name={name}")


def watch_workload(cluster: LocalCluster, namespace: str, name: str) -> tuple[Recorder, Recorder]:
    """The Deployment's versions, and its ReplicaSets' (the deployment controller's own bookkeeping)."""
    api = config.new_client_from_config(str(cluster.kubeconfig))
    apps = client.AppsV1Api(api)
    to_dict = api.sanitize_for_serialization
    return (Recorder(apps.list_namespaced_deployment, to_dict=to_dict, namespace=namespace,
                     field_selector=f"metadata.name={name}"),
            Recorder(apps.list_namespaced_replica_set, to_dict=to_dict, namespace=namespace,
                     label_selector=f"{INSTANCE}={name}"))


def replica_set_totals(history: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """The sum of the ReplicaSets' spec.replicas after each recorded change: what the deployment
    controller bounds by replicas + maxSurge (pods follow it, each ReplicaSet's on its own)."""
    sets: dict[str, int] = {}
    out = []
    for kind, rs in history:
        name = rs["metadata"]["name"]
        if kind == "DELETED":
            sets.pop(name, None)
        else:
            sets[name] = (rs.get("spec") or {}).get("replicas", 0)
        out.append(sum(sets.values()))
    return out


def ready_counts(history: list[tuple[str, dict[str, Any]]], start: int = 0) -> list[tuple[int, int]]:
    """(ready pods, pods not terminating) after each recorded change from `start` on."""
    pods: dict[str, dict[str, Any]] = {}
    out = []
    for index, (kind, pod) in enumerate(history):
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = pod
        if index >= start:
            live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
            ready = [p for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in (p.get("status") or {}).get("conditions") or [])]
            out.append((len(ready), len(live)))
    return out


def image_of(pod: dict[str, Any]) -> str:
    return pod["spec"]["containers"][0]["image"]


def state(kubectl: Kubectl, name: str) -> dict[str, Any]:
    infd = kubectl.get("infd", name) or {}
    status = infd.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    return {"generation": infd.get("metadata", {}).get("generation"), "observed": status.get("observedGeneration"),
            "phase": status.get("phase"), "ready": status.get("readyReplicas"), "rollout": status.get("rollout") or {},
            "progressing": conds.get("Progressing") or {}, "degraded": conds.get("Degraded") or {},
            "stalled": conds.get("Stalled") or {}}


def serving_images(kubectl: Kubectl, name: str) -> list[str]:
    pods = kubectl.get("pods", selector=f"{INSTANCE}={name}")["items"]
    return sorted(image_of(p) for p in pods if not p["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []))


def ready_on(kubectl: Kubectl, name: str, replicas: int, image: str) -> dict[str, Any]:
    """Wait until every replica serves `image` and the status says the rollout (if any) is done."""
    def done() -> dict[str, Any]:
        s = state(kubectl, name)
        images = serving_images(kubectl, name)
        finished = s["rollout"].get("state") in (None, "Complete")
        if (s["phase"] == "Ready" and s["observed"] == s["generation"] and finished
                and images == [image] * replicas):
            return s
        pods = [(p["metadata"]["name"], image_of(p), p["status"].get("phase"), p["spec"].get("nodeName"),
                 bool(p["metadata"].get("deletionTimestamp")))
                for p in kubectl.get("pods", selector=f"{INSTANCE}={name}")["items"]]
        raise AssertionError(f"serving {images}; phase {s['phase']}; rollout {s['rollout'].get('message')}; "
                             f"pods {pods}")
    return eventually(done, timeout=120, what=f"{replicas} ready replicas of {name} on {image}")


def edit_image(kubectl: Kubectl, name: str, image: str) -> None:
    kubectl.run("patch", "infd", name, "--type=merge", "-p", f'{{"spec":{{"serving":{{"image":"{image}"}}}}}}')


def rollout_statuses(recorder: Recorder, generation: int) -> list[dict[str, Any]]:
    """status.rollout of every recorded version that describes `generation` of the spec."""
    return [obj["status"].get("rollout") or {} for _, obj in recorder.snapshot()
            if (obj.get("status") or {}).get("observedGeneration") == generation]


def check_rollout(kubectl: Kubectl, cluster: LocalCluster, name: str, *, replicas: int, strategy: str,
                  floor: int) -> dict[str, Any]:
    """Edit the image and follow the rollout to its end; returns the final status.rollout."""
    ready_on(kubectl, name, replicas, OLD_IMAGE)
    deployment, replica_sets = watch_workload(cluster, kubectl.namespace, name)
    with watch_pods(cluster, kubectl.namespace, name) as pods, watch_infd(cluster, kubectl.namespace, name) as infd, \
            deployment, replica_sets:
        start = len(pods.snapshot())
        edit_image(kubectl, name, NEW_IMAGE)
        final = ready_on(kubectl, name, replicas, NEW_IMAGE)
        history = pods.snapshot()
        statuses = rollout_statuses(infd, final["generation"])
        recorders = (pods, infd, deployment, replica_sets)
        assert not any(r.errors for r in recorders), [r.errors for r in recorders]

    counts = ready_counts(history, start)
    print(f"\n{strategy}: (ready, alive) after each pod change: {counts}")
    assert min(ready for ready, _ in counts) >= floor, counts
    if strategy == "ReplaceInPlace":
        # What the operator decides: every version of the Deployment with the new template says
        # maxSurge 0 (no surge was ever rendered or applied), and so the deployment controller
        # never asks for more than `replicas` pods in all. Pods themselves are not bounded: the
        # old and new ReplicaSets' controllers delete and create independently, so a new pod can
        # appear a moment before the old one it replaces is marked for deletion.
        surges = [(d["metadata"].get("generation"), d["spec"]["strategy"].get("rollingUpdate"))
                  for _, d in deployment.snapshot()
                  if NEW_IMAGE in json.dumps(d["spec"]["template"])
                  and (d["spec"]["strategy"].get("rollingUpdate") or {}).get("maxSurge") not in (0, "0", "0%")]
        assert surges == [], f"the Deployment carried a surge with the new template: {surges}"
        totals = replica_set_totals(replica_sets.snapshot())
        assert max(totals) <= replicas, f"the ReplicaSets asked for more than {replicas} pods: {totals}"
    else:
        # A surge pod was up beside the full set; what the operator decides (maxSurge 1) bounds the
        # ReplicaSets at replicas + 1. Pods can briefly exceed that for the reason given above.
        assert max(alive for _, alive in counts) >= replicas + 1, f"no surge pod: {counts}"
        totals = replica_set_totals(replica_sets.snapshot())
        assert max(totals) == replicas + 1, f"the ReplicaSets did not ask for exactly one surge pod: {totals}"
    new_pods = {p["metadata"]["name"] for _, p in history if image_of(p) == NEW_IMAGE}
    assert len(new_pods) == replicas, new_pods

    # Every status written for the edited spec states the same strategy and revision; progress
    # only moves forward; the last one says Complete.
    assert statuses, "no status for the edited generation"
    assert {s.get("strategy") for s in statuses} == {strategy}, statuses
    assert len({s.get("revision") for s in statuses}) == 1, statuses
    updated = [s["updatedReplicas"] for s in statuses]
    assert updated == sorted(updated), statuses
    last = statuses[-1]
    assert (last["state"], last["updatedReplicas"], last["replicas"]) == ("Complete", replicas, replicas), last
    assert last["neededGPUs"] == 1 and isinstance(last["freeGPUs"], int), last
    print(f"{strategy}: statuses seen for the edit: {[(s['state'], s['updatedReplicas']) for s in statuses]}")
    print(f"{strategy}: reason: {last['reason']}")
    return last


def test_full_nodes_replace_one_replica_at_a_time(operator: Any, cluster: LocalCluster, kubectl: Kubectl,
                                                  gpu_pool: Callable[[int], list[str]]) -> None:
    gpu_pool(3)
    kubectl.apply_yaml(manifest("three", kubectl.namespace, 3))
    last = check_rollout(kubectl, cluster, "three", replicas=3, strategy="ReplaceInPlace", floor=2)
    assert last["freeGPUs"] == 0
    assert "no room for one more replica: 0 GPUs free" in last["reason"]
    assert "2 of 3 serve meanwhile" in last["reason"]


def test_room_for_one_more_replica_surges(operator: Any, cluster: LocalCluster, kubectl: Kubectl,
                                          gpu_pool: Callable[[int], list[str]]) -> None:
    gpu_pool(4)
    kubectl.apply_yaml(manifest("three", kubectl.namespace, 3))
    last = check_rollout(kubectl, cluster, "three", replicas=3, strategy="Surge", floor=3)
    assert last["freeGPUs"] == 1 and "room for one more replica" in last["reason"]


def test_a_single_replica_waits_for_room_until_another_deployment_goes(
        operator: Any, cluster: LocalCluster, kubectl: Kubectl, gpu_pool: Callable[[int], list[str]]) -> None:
    gpu_pool(2)
    kubectl.apply_yaml(manifest("other", kubectl.namespace, 1))
    ready_on(kubectl, "other", 1, OLD_IMAGE)
    kubectl.apply_yaml(manifest("single", kubectl.namespace, 1, when_no_room="Wait"))
    ready_on(kubectl, "single", 1, OLD_IMAGE)

    edit_image(kubectl, "single", NEW_IMAGE)
    blocked = eventually(lambda: (s := state(kubectl, "single"))["progressing"].get("reason") == "RolloutBlocked"
                         and s, timeout=90, what="RolloutBlocked")
    print(f"\nblocked: {blocked['progressing']['message']}")
    rollout = blocked["rollout"]
    assert (rollout["strategy"], rollout["state"], rollout["neededGPUs"], rollout["freeGPUs"]) == \
        ("WaitForRoom", "Blocked", 1, 0), rollout
    assert "needs 1 GPU on one node, 0 free on usable NVIDIA-L4 nodes" in blocked["progressing"]["message"]
    assert "whenNoRoom: ReplaceInPlace" in rollout["unblock"]
    assert blocked["degraded"]["reason"] == "RolloutBlocked" and blocked["stalled"]["status"] == "False"
    assert serving_images(kubectl, "single") == [OLD_IMAGE], "the only replica must keep serving"

    kubectl.run("delete", "infd", "other", "--wait=false")
    final = ready_on(kubectl, "single", 1, NEW_IMAGE)
    assert final["rollout"]["strategy"] == "WaitForRoom" and final["progressing"]["reason"] == "RolloutComplete"


# Images the local kwok plays as a real kubelet would (devcluster/kwok-pod-stages.yaml).
@pytest.mark.parametrize(("image", "reason"), [
    ("kwok.shardwise.invalid/image-pull-backoff:1", "ImagePullBackOff"),
    ("kwok.shardwise.invalid/crash-loop:1", "CrashLoopBackOff"),
])
def test_a_new_version_that_cannot_start_fails_the_rollout_until_reverted(
        operator: Any, cluster: LocalCluster, kubectl: Kubectl, gpu_pool: Callable[[int], list[str]],
        image: str, reason: str) -> None:
    gpu_pool(3)
    kubectl.apply_yaml(manifest("two", kubectl.namespace, 2))
    ready_on(kubectl, "two", 2, OLD_IMAGE)

    edit_image(kubectl, "two", image)
    failed = eventually(lambda: (s := state(kubectl, "two"))["rollout"].get("state") == "Failed" and s,
                        timeout=90, what="RolloutFailed")
    print(f"\nfailed: {failed['degraded']['message']}")
    assert (failed["progressing"]["status"], failed["progressing"]["reason"]) == ("False", "RolloutFailed")
    assert (failed["degraded"]["status"], failed["degraded"]["reason"]) == ("True", "RolloutFailed")
    assert reason in failed["degraded"]["message"]
    assert failed["stalled"]["status"] == "True"
    assert failed["rollout"]["strategy"] == "Surge"
    assert serving_images(kubectl, "two") == [OLD_IMAGE, OLD_IMAGE], "the old replicas must keep serving"

    edit_image(kubectl, "two", OLD_IMAGE)
    final = ready_on(kubectl, "two", 2, OLD_IMAGE)
    assert final["degraded"]["status"] == "False" and final["stalled"]["status"] == "False", final
    assert final["rollout"]["reason"].startswith("back to the previous version"), final["rollout"]
    eventually(lambda: [p for p in kubectl.get("pods", selector=f"{INSTANCE}=two")["items"]
                        if image_of(p) == image] == [], timeout=60, what="the failing pod gone")
