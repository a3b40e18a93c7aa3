"""LoRA adapters on the real control plane: downloaded once into the model's cache claim, loaded on
every ready replica at runtime, routed by name through a real Envoy, and a bad one reported.

The hub is the local hub-compatible server, serving the tiny model and two adapters written by
hack/make-tiny-lora.py; the downloader Jobs run as real `shardwise-download` processes; the cache
claim binds to a hostPath volume; the simulated engines (the fleet) answer vLLM's LoRA endpoints
as the real 0.32 engine does (captures in tests/fixtures/vllm-0.32-cpu/lora/) and read adapter
paths through the pods' claim mounts.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from shardwise_runtime.sim.hub import load_repo
from shardwise_runtime.sim.hub_thread import HubThread
from shardwise_runtime.sim.localpods import LocalPodRunner
from shardwise_runtime.sim.tinymodel import write_tiny_model

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually, simulated_fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME, SERVED = "tuned", "tuned-base"
BASE, SQL, BIG, WRONG = "tiny/llama", "tiny/sql-lora", "tiny/big-lora", "tiny/wrong-lora"


def write_adapter(folder: pathlib.Path, rank: int, seed: int, base: pathlib.Path | None = None) -> None:
    subprocess.run([sys.executable, str(ROOT / "hack/make-tiny-lora.py"), "--out", str(folder), "--rank", str(rank),
                    "--seed", str(seed), *(["--base", str(base)] if base else [])],
                   check=True, capture_output=True, timeout=60)


def spec(hub: str, storage_class: str, adapters: list[dict[str, Any]], replicas: int = 1) -> str:
    return json.dumps({
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": NAME},
        "spec": {"model": {"name": BASE, "servedName": SERVED,
                           "architecture": {"parameters": 10_000_000, "layers": 4, "hiddenSize": 256,
                                            "attentionHeads": 4, "kvHeads": 2},
                           "cache": {"mode": "Cluster", "storageClassName": storage_class, "hubEndpoint": hub}},
                 "serving": {"maxModelLen": 2048, "maxConcurrency": 4}, "parallelism": {"objective": "Cost"},
                 "lora": {"maxLoraRank": 16, "maxLoras": 2}, "adapters": adapters, "replicas": replicas}})


class Setup:
    def __init__(self, kubectl: Kubectl, hub: HubThread, storage_class: str, door: FrontDoor) -> None:
        self.kubectl, self.hub, self.storage_class, self.door = kubectl, hub, storage_class, door

    def apply(self, adapters: list[dict[str, Any]], replicas: int = 1) -> None:
        self.kubectl.apply_yaml(spec(self.hub.url, self.storage_class, adapters, replicas))

    def status(self) -> dict[str, Any]:
        return (self.kubectl.get("infd", NAME) or {}).get("status") or {}

    def adapters(self) -> dict[str, dict[str, Any]]:
        return {a["name"]: a for a in self.status().get("adapters") or []}

    def pods(self) -> list[dict[str, Any]]:
        listing = self.kubectl.get("pods", selector=f"shardwise.io/inference-deployment={NAME}") or {}
        return [p for p in listing.get("items", []) if not p["metadata"].get("deletionTimestamp")]

    def ready_ips(self) -> list[str]:
        return [p["status"]["podIP"] for p in self.pods() if p["status"].get("podIP") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]

    def events(self, reason: str) -> list[dict[str, Any]]:
        listing = self.kubectl.get("events") or {}
        return [e for e in listing.get("items", []) if e.get("reason") == reason
                and e["involvedObject"].get("name") == NAME and e["involvedObject"].get("kind") == "InferenceDeployment"]


@pytest.fixture(scope="module")
def setup(cluster: LocalCluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    namespace = f"lora-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    work = tmp_path_factory.mktemp("lora")
    root = work / "hub"
    write_tiny_model(root / BASE, shards=1, shard_bytes=1 << 20)
    write_adapter(root / SQL, rank=8, seed=1)
    write_adapter(root / BIG, rank=64, seed=2)  # above the deployment's maxLoraRank 16
    narrow = json.loads((root / BASE / "config.json").read_text())
    (work / "narrow.json").write_text(json.dumps({**narrow, "hidden_size": 128, "head_dim": 32}))
    write_adapter(root / WRONG, rank=8, seed=3, base=work / "narrow.json")  # another base model's widths
    volume = work / "volume"
    volume.mkdir()
    storage_class = f"cache-{namespace}"
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": storage_class},
         "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(volume)}}}]))
    fleet = simulated_fleet(cluster, namespace, "lora")
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"lora-gw-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1)
    runner = LocalPodRunner(str(cluster.kubeconfig), namespace, work / "pods")
    with HubThread(root) as hub:
        fleet.start()
        runner.start()
        door.start()
        try:
            yield Setup(kubectl, hub, storage_class, door)
        finally:
            door.stop()
            runner.stop()
            fleet.stop()
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
            cluster.kubectl("delete", "pv", storage_class, "--wait=false", check=False)
            cluster.kubectl("delete", "storageclass", storage_class, "--wait=false", check=False)


def _complete(base_url: str, model: str) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/completions", timeout=30,
                      json={"model": model, "prompt": "SELECT", "max_tokens": 8, "temperature": 0})


def _served_on(ip: str) -> set[str]:
    answer = httpx.get(f"http://{ip}:8000/v1/models", timeout=10).json()
    return {m["id"] for m in answer["data"] if m.get("parent")}


def test_an_adapter_is_downloaded_once_loaded_and_served_by_name(setup: Setup) -> None:
    setup.apply([{"name": "sql", "source": {"repo": SQL}}])

    def loaded() -> dict[str, Any]:
        entry = setup.adapters().get("sql") or {}
        assert entry.get("reason") == "Loaded" and entry.get("loadedReplicas") == 1, setup.status().get("adapters")
        return entry

    entry = eventually(loaded, timeout=300, interval=1, what="adapter sql loaded on the one replica")
    commit = load_repo(setup.hub.hub.root, SQL).commit  # type: ignore[union-attr]
    assert entry["commit"] == commit
    total = sum(p.stat().st_size for p in (setup.hub.hub.root / SQL).iterdir())
    assert setup.hub.hub.served(SQL) == total, "the adapter's bytes fetched from the hub exactly once"
    jobs = [j["metadata"]["name"] for j in (setup.kubectl.get("jobs") or {}).get("items", [])]
    assert sum("-lora-" in j for j in jobs) == 1, jobs
    condition = setup.kubectl.condition(NAME, "AdaptersReady") or {}
    assert (condition.get("status"), condition.get("reason")) == ("True", "AdaptersLoaded")

    (ip,) = setup.ready_ips()
    assert _served_on(ip) == {"sql"}
    direct = _complete(f"http://{ip}:8000", "sql")
    base = _complete(f"http://{ip}:8000", SERVED)
    assert direct.status_code == base.status_code == 200
    assert direct.json()["choices"][0]["text"] != base.json()["choices"][0]["text"]
    # The gateway knows the adapter as a model of its own, routed to the base deployment's replicas.
    through = eventually(lambda: (r := _complete(setup.door.base_url.removesuffix("/v1"), "sql")).status_code == 200
                         and r, timeout=60, what="the adapter answered through the gateway")
    assert through.json()["model"] == "sql"


def test_a_new_replica_gets_the_adapters_and_a_bad_one_disturbs_nothing(setup: Setup) -> None:
    good = [{"name": "sql", "source": {"repo": SQL}}]
    setup.apply(good, replicas=2)
    eventually(lambda: (setup.adapters().get("sql") or {}).get("loadedReplicas") == 2
               and setup.adapters()["sql"]["replicas"] == 2, timeout=180, interval=1,
               what="the scaled-up replica serves the adapter too")
    before = sorted((p["metadata"]["uid"], p["metadata"]["creationTimestamp"]) for p in setup.pods())

    setup.apply([*good, {"name": "big", "source": {"repo": BIG}}, {"name": "wrong", "source": {"repo": WRONG}}],
                replicas=2)
    entry = eventually(lambda: (e := setup.adapters().get("big") or {}).get("reason") == "RankAboveLimit" and e,
                       timeout=240, interval=1, what="the rank-64 adapter refused with its reason")
    wrong = eventually(lambda: (e := setup.adapters().get("wrong") or {}).get("reason") == "AdapterBaseMismatch"
                       and e, timeout=240, interval=1, what="the other base model's adapter refused by its downloader")
    assert "another base model" in wrong["message"] and wrong["loadedReplicas"] == 0
    assert "max_lora_rank" in entry["message"] or "16" in entry["message"], entry
    condition = setup.kubectl.condition(NAME, "AdaptersReady") or {}
    assert (condition.get("status"), condition.get("reason")) == ("False", "RankAboveLimit")
    eventually(lambda: len(setup.events("RankAboveLimit")) == 1, timeout=30, what="one RankAboveLimit event")
    assert setup.adapters()["sql"]["loadedReplicas"] == 2, "the good adapter stays loaded everywhere"
    assert sorted((p["metadata"]["uid"], p["metadata"]["creationTimestamp"]) for p in setup.pods()) == before, \
        "adding adapters restarted or replaced no pod"
    refused = _complete(setup.door.base_url.removesuffix("/v1"), "big")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "adapter_unavailable"
    assert "max_lora_rank" in refused.json()["error"]["message"] or "rank" in refused.json()["error"]["message"]

    setup.apply([], replicas=2)
    eventually(lambda: all(not _served_on(ip) for ip in setup.ready_ips()) and not setup.adapters(), timeout=120,
               interval=1, what="every adapter unloaded and gone from the status")
    ip = setup.ready_ips()[0]
    assert _complete(f"http://{ip}:8000", "sql").status_code == 404
    assert not setup.kubectl.condition(NAME, "AdaptersReady")
    assert sorted((p["metadata"]["uid"], p["metadata"]["creationTimestamp"]) for p in setup.pods()) == before
