"""The informer against a scripted API: paginated list, relist replaces, 410, own writes."""

import threading
from typing import Any

from shardwise.controller.cache import Caches, parse_selector, slim_node, slim_pod
from shardwise.kube.informer import Informer
from shardwise.kube.client import ApiException


def obj(name: str, rv: int, ns: str = "ns", **extra: Any) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "managedFields": [{"x": 1}]},
            **extra}


class ScriptedKube:
    """Lists come from `lists` (each a list of pages); watches from `watches` (each a list of
    events, or an exception to raise). Stops the informer when the script runs out."""

    def __init__(self, lists: list[list[dict]], watches: list[Any], stop: threading.Event) -> None:
        self.lists, self.watches, self.stop = lists, watches, stop
        self.requests: list[dict] = []

    def request(self, method: str, path: str, *, query: dict | None = None, **_: Any) -> dict:
        self.requests.append(dict(query or {}))
        pages = self.lists[0]
        index = int((query or {}).get("continue") or 0)
        page = dict(pages[index])
        if index + 1 < len(pages):
            page["metadata"] = {**page.get("metadata", {}), "continue": str(index + 1)}
        else:
            self.lists.pop(0)
        return page

    def watch(self, path: str, query: dict, timeout_s: float):
        self.requests.append(dict(query, watch=True))
        if not self.watches:
            self.stop.set()
            return
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


def run(informer: Informer, stop: threading.Event) -> None:
    thread = threading.Thread(target=informer.run, args=(stop,))
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive()


def test_paginated_list_then_watch_and_a_relist_after_410_drops_what_is_gone() -> None:
    stop = threading.Event()
    changes: list[tuple] = []
    kube = ScriptedKube(
        lists=[[{"items": [obj("a", 1)], "metadata": {}}, {"items": [obj("b", 2)], "metadata": {"resourceVersion": "5"}}],
               [{"items": [obj("a", 1), obj("c", 9)], "metadata": {"resourceVersion": "10"}}]],
        watches=[[{"type": "MODIFIED", "object": obj("a", 6)}, {"type": "BOOKMARK", "object": obj("", 7)},
                  {"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
                 [{"type": "ADDED", "object": obj("d", 11)}]],
        stop=stop)
    informer = Informer(kube, "things", "/x", label_selector="l", page_size=1,  # type: ignore[arg-type]
                        on_change=lambda old, new: changes.append((old and old["metadata"]["name"],
                                                                   new and new["metadata"]["resourceVersion"])))
    run(informer, stop)
    assert informer.synced.is_set()
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "c", "d"]  # b is gone after the relist
    assert "managedFields" not in informer.get(("ns", "a"))["metadata"]
    assert informer.get(("ns", "a"))["metadata"]["resourceVersion"] == "1"  # the relist's copy
    lists = [q for q in kube.requests if "watch" not in q]
    assert [q.get("limit") for q in lists] == [1, 1, 1] and lists[1]["continue"] == "1"
    assert all(q["labelSelector"] == "l" for q in kube.requests)
    watches = [q for q in kube.requests if "watch" in q]
    assert watches[0]["resourceVersion"] == "5" and watches[1]["resourceVersion"] == "10"
    assert (None, "1") in changes and ("a", "6") in changes and ("b", None) in changes and (None, "11") in changes


def test_own_writes_are_stored_at_once_and_their_watch_event_changes_nothing() -> None:
    changes: list = []
    informer = Informer(None, "things", "/x", on_change=lambda old, new: changes.append(new))  # type: ignore[arg-type]
    informer.replace([obj("a", 1)])
    changes.clear()
    informer.observe_write(obj("a", 5))
    assert informer.get(("ns", "a"))["metadata"]["resourceVersion"] == "5"
    informer.apply_event("MODIFIED", obj("a", 5))  # the same version from the watch: not a change
    informer.apply_event("MODIFIED", obj("a", 3))  # an older one arriving late: ignored
    assert changes == [] and informer.get(("ns", "a"))["metadata"]["resourceVersion"] == "5"
    informer.apply_event("DELETED", obj("a", 6))
    assert informer.get(("ns", "a")) is None and changes == [None]


def test_errors_back_off_and_an_optional_kind_that_is_not_installed_syncs_empty() -> None:
    stop = threading.Event()

    class Missing(ScriptedKube):
        def request(self, *args: Any, **kwargs: Any) -> dict:
            self.stop.set()  # one attempt is enough to see the outcome
            raise ApiException(status=404, reason="Not Found")

    informer = Informer(Missing([], [], stop), "lws", "/x", optional=True)  # type: ignore[arg-type]
    run(informer, stop)
    assert informer.synced.is_set() and informer.items() == [] and not informer.installed


def test_slim_forms_keep_what_planning_and_status_read_and_drop_the_rest() -> None:
    gpu = {"metadata": {"name": "g", "labels": {"nvidia.com/gpu.product": "X"}, "annotations": {"big": "x"}},
           "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": ["a"] * 10,
                      "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t"},
                                     {"type": "MemoryPressure"}]}}
    slim = slim_node(gpu)
    assert "annotations" not in slim["metadata"] and "images" not in slim["status"]
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True", "reason": None}]
    assert slim_node({"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8"}}}) == {
        "metadata": {"name": "cpu", "resourceVersion": None}}

    def pod(gpus: int, labels: dict | None = None) -> dict:
        return {"metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
                "spec": {"nodeName": "g", "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}],
                                                          "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
                "status": {"phase": "Running", "podIP": "1.2.3.4", "conditions": [{"type": "Ready"}]}}

    assert slim_pod(pod(0)) is None
    kept = slim_pod(pod(2))
    assert kept["spec"]["containers"] == [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    assert "podIP" not in kept["status"]
    ours = slim_pod(pod(0, {"shardwise.io/inference-deployment": "m"}))
    assert ours["status"]["podIP"] == "1.2.3.4" and ours["status"]["conditions"] == [{"type": "Ready"}]
    # Our pods also keep what tells the template version apart (rollout progress).
    assert ours["spec"]["containers"] == [{"name": "c", "image": "i", "env": [{"name": "A"}],
                                           "resources": {"limits": {"nvidia.com/gpu": "0"}}}]
    assert ours["metadata"]["annotations"] == {}


def test_cached_reads_by_kind_namespace_and_label_selector() -> None:
    caches = Caches(None, ["a", "b"])  # type: ignore[arg-type]
    infd = caches._informer("shardwise.io/v1alpha1", "InferenceDeployment", "a")
    infd.replace([obj("m", 1, ns="a", status={"x": 1})])
    copy = caches.get("shardwise.io/v1alpha1", "InferenceDeployment", "a", "m")
    copy["status"]["x"] = 2  # callers get a copy of the object they build updates from
    assert caches.get("shardwise.io/v1alpha1", "InferenceDeployment", "a", "m")["status"]["x"] == 1
    assert not caches.holds("shardwise.io/v1alpha1", "InferenceDeployment", "elsewhere")
    label = {"shardwise.io/inference-deployment": "m", "role": "leader"}
    caches.pod_informer.replace([
        {"metadata": {"name": "p1", "namespace": "a", "labels": label, "resourceVersion": "1"}},
        {"metadata": {"name": "p2", "namespace": "a", "labels": {**label, "role": "worker"}, "resourceVersion": "1"}},
        {"metadata": {"name": "p3", "namespace": "b", "labels": label, "resourceVersion": "1"}},
    ])
    found = caches.pods("a", "shardwise.io/inference-deployment=m,role=leader")
    assert [p["metadata"]["name"] for p in found] == ["p1"]
    assert parse_selector("a=b, c==d") == {"a": "b", "c": "d"}


def test_children_listed_without_a_kind_are_stored_with_one() -> None:
    # List items carry no apiVersion/kind; reconcile tells a LeaderWorkerSet from a Deployment by it.
    stop = threading.Event()
    kube = ScriptedKube([[{"items": [obj("m", 1, ns="a")], "metadata": {"resourceVersion": "5"}}]], [], stop)
    caches = Caches(kube, ["a"])  # type: ignore[arg-type]
    informer = caches._informer("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "a")
    informer._list()
    stored = caches.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "a", "m")
    assert (stored["apiVersion"], stored["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert "managedFields" not in stored["metadata"]


def test_the_watch_event_of_our_own_create_is_no_news_whichever_arrives_first() -> None:
    seen: list[str] = []
    caches = Caches(None, ["a"],  # type: ignore[arg-type]
                    on_child=lambda old, new: seen.append((new or old)["metadata"]["name"]))
    informer = caches._informer("apps/v1", "Deployment", "a")

    def created(name: str, rv: int) -> dict:
        return {"apiVersion": "apps/v1", "kind": "Deployment", **obj(name, rv, ns="a")}

    caches.creating("Deployment", "a", "early")
    informer.apply_event("ADDED", created("early", 2))  # the event beats the answer
    caches.observe_write(created("early", 2))
    caches.creating("Deployment", "a", "late")
    caches.observe_write(created("late", 3))  # the answer first: the event then carries a stored version
    informer.apply_event("ADDED", created("late", 3))
    assert seen == []
    caches.creating("Deployment", "a", "failed")
    caches.creation_settled("Deployment", "a", "failed")  # the create failed: someone else's object is news
    informer.apply_event("ADDED", created("failed", 4))
    informer.apply_event("MODIFIED", created("early", 5))
    assert seen == ["failed", "early"]


def test_the_operators_own_configmaps_are_watched_by_name_and_read_from_memory() -> None:
    from shardwise.kube.client import Kube

    stop = threading.Event()
    pricing = {"items": [{**obj("shardwise-pricing", 3, ns="sys"), "data": {"NVIDIA-L40S": "1.1"}}],
               "metadata": {"resourceVersion": "3"}}
    kube = ScriptedKube([[pricing], [{"items": [], "metadata": {"resourceVersion": "3"}}]], [], stop)
    own = (("sys", "shardwise-pricing"), ("sys", "shardwise-corrections"))
    caches = Caches(kube, ["a"], configmaps=own)  # type: ignore[arg-type]
    for named in own:
        caches.named("v1", "ConfigMap", *named)._list()  # type: ignore[union-attr]
    assert [q.get("fieldSelector") for q in kube.requests] == ["metadata.name=shardwise-pricing",
                                                               "metadata.name=shardwise-corrections"]

    class NoRequests(Kube):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("read from the API server")

    from shardwise.controller.cluster import Cluster

    reader = Cluster(NoRequests(api_client=object()), caches)  # type: ignore[arg-type]
    assert reader.get("v1", "ConfigMap", "sys", "shardwise-pricing")["data"] == {"NVIDIA-L40S": "1.1"}
    assert reader.get("v1", "ConfigMap", "sys", "shardwise-corrections") is None  # absent: no live read
    assert caches.named("v1", "ConfigMap", "sys", "other") is None


def test_a_create_that_fails_leaves_no_expectation_behind() -> None:
    # An API error or an unreachable server: the next ADDED event of that name (someone else's
    # object, or ours created by a retry) must reach the handler.
    from shardwise.kube.client import Kube

    seen: list[str] = []
    caches = Caches(None, ["a"],  # type: ignore[arg-type]
                    on_child=lambda old, new: seen.append((new or old)["metadata"]["name"]))

    class Failing(Kube):
        def __init__(self, error: BaseException) -> None:
            super().__init__(api_client=object())  # type: ignore[arg-type]
            self.error = error

        def request(self, *args: Any, **kwargs: Any) -> Any:
            raise self.error

    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", **obj("m", 1, ns="a")}
    for error in (ApiException(status=500, reason="Internal Server Error"), ConnectionRefusedError()):
        kube = Failing(error)
        kube.observer = caches
        try:
            kube.apply(deployment, force=False)
        except (ApiException, OSError):
            pass
        caches._informer("apps/v1", "Deployment", "a").apply_event("ADDED", deployment)
        caches._informer("apps/v1", "Deployment", "a").apply_event("DELETED", deployment)
    assert seen == ["m", "m", "m", "m"]
