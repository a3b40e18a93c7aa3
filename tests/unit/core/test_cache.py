from shardwise.controller.cache import ClusterCache, slim_pod


def node(name: str, gpus: str = "8") -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "X"}, "annotations": {"big": "x" * 100}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus}, "images": ["a"] * 10,
                       "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure"}]}}


def pod(name: str, gpus: int, phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "i",
                                                      "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def test_cold_until_the_first_event_then_tracks_adds_updates_and_deletes() -> None:
    cache = ClusterCache()
    assert cache.nodes() is None and cache.gpu_pods() is None
    cache.on_node("ADDED", node("a"))
    cache.on_node(None, node("b"))
    cache.on_node("MODIFIED", node("a", gpus="4"))
    cache.on_node("DELETED", node("b"))
    nodes = cache.nodes()
    assert [n["metadata"]["name"] for n in nodes] == ["a"]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert "annotations" not in nodes[0]["metadata"] and "images" not in nodes[0]["status"]
    assert [c["type"] for c in nodes[0]["status"]["conditions"]] == ["Ready"]


def test_only_pods_holding_gpus_are_kept_and_finished_pods_release_them() -> None:
    cache = ClusterCache()
    cache.on_pod("ADDED", pod("cpu-only", 0))
    assert cache.gpu_pods() == []
    cache.on_pod("ADDED", pod("g", 2))
    assert len(cache.gpu_pods()) == 1
    cache.on_pod("MODIFIED", pod("g", 2, phase="Succeeded"))
    assert cache.gpu_pods() == []
    assert slim_pod(pod("g", 1))["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
