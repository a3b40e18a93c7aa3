"""Model weights cached once per namespace, against the real control plane.

A local hub-compatible server (runtime/shardwise_runtime/sim/hub.py) serves a tiny model, the
downloader Job's pods run as real `shardwise-download` processes (sim/localpods.py) that use the
real huggingface_hub client, and the cache claims bind to hostPath PersistentVolumes this test
creates (no provisioner runs here) under a no-provisioner storage class of its own.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from shardwise_runtime.sim.hub_thread import HubThread
from shardwise_runtime.sim.localpods import LocalPodRunner
from shardwise_runtime.sim.tinymodel import write_tiny_model

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import Kubectl, OperatorProcess, eventually

pytestmark = pytest.mark.e2e

REPO = "tiny/llama"
SHARDS, SHARD_BYTES = 4, 2 << 20
# Per response; the downloader fetches the shards in parallel, so about 8 s for the model at
# best, which leaves several progress scrapes (every second) to watch.
THROTTLE_BPS = 256 * 1024


def manifest(name: str, *, repo: str = REPO, storage_class: str, hub: str, extra: str = "") -> str:
    return f"""
apiVersion: shardwise.io/v1alpha1
kind: InferenceDeployment
metadata: {{name: {name}}}
spec:
  model:
    name: {repo}
    architecture: {{parameters: 10000000, layers: 4, hiddenSize: 256, attentionHeads: 4, kvHeads: 2}}
    cache: {{mode: Cluster, storageClassName: {storage_class}, hubEndpoint: "{hub}"}}
{extra}
  serving: {{maxModelLen: 2048, maxConcurrency: 4}}
  parallelism: {{objective: Cost}}
  replicas: 1
"""


@pytest.fixture
def hub(tmp_path: pathlib.Path) -> Iterator[HubThread]:
    root = tmp_path / "hub"
    write_tiny_model(root / REPO, shards=SHARDS, shard_bytes=SHARD_BYTES)
    write_tiny_model(root / "tiny/gated", shards=1, shard_bytes=4096, gated_token="hf_allowed")
    with HubThread(root, throttle_bps=THROTTLE_BPS) as local:
        yield local


@pytest.fixture
def storage(cluster: LocalCluster, namespace: str, tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    """A storage class of this test's own and one hostPath volume for it: the cache's disk."""
    name, folder = f"cache-{namespace}", tmp_path / "volume"
    folder.mkdir()
    objects = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
         "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": name,
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder)}}},
    ]
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    try:
        yield name, folder
    finally:
        cluster.kubectl("delete", "pv", name, "--wait=false", check=False)
        cluster.kubectl("delete", "storageclass", name, "--wait=false", check=False)


@pytest.fixture
def runner(cluster: LocalCluster, namespace: str, tmp_path: pathlib.Path) -> Iterator[LocalPodRunner]:
    local = LocalPodRunner(str(cluster.kubeconfig), namespace, tmp_path / "pods").start()
    try:
        yield local
    finally:
        local.stop()


def _status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    return (kubectl.get("infd", name) or {}).get("status") or {}


def _items(kubectl: Kubectl, kind: str) -> list[dict[str, Any]]:
    return (kubectl.get(kind) or {}).get("items", [])


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_two_deployments_share_one_download_and_serve_only_after_it(
        operator: OperatorProcess, kubectl: Kubectl, hub: HubThread, storage: tuple[str, pathlib.Path],
        runner: LocalPodRunner) -> None:
    storage_class, _ = storage
    total = sum(p.stat().st_size for p in (hub.hub.root / REPO).iterdir())
    for name in ("tiny-a", "tiny-b"):
        kubectl.apply_yaml(manifest(name, storage_class=storage_class, hub=hub.url))

    percents: set[int] = set()
    columns: set[str] = set()

    def both_ready() -> bool:
        statuses = [_status(kubectl, n) for n in ("tiny-a", "tiny-b")]
        deployments = _items(kubectl, "deployments")
        for st in statuses:
            cache = st.get("modelCache") or {}
            if cache.get("phase") == "Downloading":
                percents.add(int(cache.get("percent") or 0))
                # Serving pods start only after the weights are complete and verified.
                assert not deployments, "a serving workload exists while the weights download"
        out = kubectl.run("get", "infd", "--no-headers", "-o", "wide").stdout  # DOWNLOAD is a wide column
        columns.update(line for line in out.splitlines() if "Downloading" in line)
        return all(st.get("phase") == "Ready" for st in statuses)

    eventually(both_ready, timeout=240, interval=0.5, what="both deployments Ready after one download")
    statuses = [_status(kubectl, n) for n in ("tiny-a", "tiny-b")]
    claims = _items(kubectl, "persistentvolumeclaims")
    jobs = _items(kubectl, "jobs")
    assert len(claims) == 1 and len(jobs) == 1, "one cache and one download for both deployments"
    claim = claims[0]["metadata"]["name"]
    from shardwise_runtime.sim.hub import load_repo
    commit = load_repo(hub.hub.root, REPO).commit  # type: ignore[union-attr]
    for st in statuses:
        cache = st["modelCache"]
        assert (cache["claim"], cache["commit"], cache["percent"], cache["phase"]) == (claim, commit, 100, "Ready")
        assert _condition(st, "ModelCached")["status"] == "True"
    assert any(0 < p < 100 for p in percents), f"progress seen while downloading: {sorted(percents)}"
    assert any("%" in line for line in columns), f"`kubectl get infd` while downloading: {columns}"
    assert hub.hub.served(REPO) == total, "every byte fetched from the hub exactly once"
    for deployment in _items(kubectl, "deployments"):
        pod = deployment["spec"]["template"]["spec"]
        assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}} in pod["volumes"]
        assert pod["containers"][0]["args"][0] == "/model-cache/model"
    reasons = {e["reason"] for e in _items(kubectl, "events")}
    assert {"DownloadStarted", "WeightsCached"} <= reasons

    # Deleting both: the cache goes after the (shortened) grace period, its Job with it.
    kubectl.run("delete", "infd", "tiny-a", "tiny-b")
    def leftovers() -> list[dict[str, Any]]:
        return [{"kind": o.get("kind"), "name": o["metadata"]["name"], "finalizers": o["metadata"].get("finalizers"),
                 "deleting": o["metadata"].get("deletionTimestamp"), "annotations": o["metadata"].get("annotations")}
                for kind in ("persistentvolumeclaims", "jobs") for o in _items(kubectl, kind)]

    left: list[dict[str, Any]] = []

    def gone() -> bool:
        left[:] = leftovers()
        return not left

    try:
        eventually(gone, timeout=120, what="the unused cache claim and its Job removed")
    except AssertionError as error:
        raise AssertionError(f"{error}: {left}") from None


def test_killed_download_resumes_without_fetching_finished_files(
        operator: OperatorProcess, kubectl: Kubectl, hub: HubThread, storage: tuple[str, pathlib.Path],
        runner: LocalPodRunner) -> None:
    storage_class, volume = storage
    sizes = {p.name: p.stat().st_size for p in (hub.hub.root / REPO).iterdir()}
    kubectl.apply_yaml(manifest("tiny-resume", storage_class=storage_class, hub=hub.url))

    def halfway() -> str | None:
        cache = _status(kubectl, "tiny-resume").get("modelCache") or {}
        if cache.get("phase") == "Downloading" and int(cache.get("percent") or 0) >= 30 and runner.running:
            return next(iter(runner.running))
        return None

    key = eventually(halfway, timeout=180, interval=0.3, what="the download 30 % done")
    assert runner.kill(key)
    eventually(lambda: key not in runner.running, timeout=60, what="the killed pod recorded as failed")
    model_dir = volume / "model"
    finished = {name for name in sizes if (model_dir / name).is_file()}
    partial = sum(p.stat().st_size for p in model_dir.rglob("*.part"))
    before = dict(hub.hub.bytes_served)
    assert len(finished) < len(sizes), "the kill should leave work to resume"

    eventually(lambda: _status(kubectl, "tiny-resume").get("phase") == "Ready", timeout=240,
               what="the retried download complete and the deployment Ready")
    second = {n: hub.hub.bytes_served[(REPO, n)] - before.get((REPO, n), 0) for n in sizes}
    assert all(second[n] == 0 for n in finished), f"finished files fetched again: {second}"
    assert sum(second.values()) == sum(sizes.values()) - sum(sizes[n] for n in finished) - partial
    pods = kubectl.get("pods", selector="shardwise.io/model-cache")["items"]
    assert sorted(p["status"]["phase"] for p in pods) == ["Failed", "Succeeded"]


# What the EBS CSI driver's external provisioner reports for a ReadWriteMany claim.
EBS_RWX_REFUSAL = ('failed to provision volume with StorageClass "{klass}": rpc error: code = InvalidArgument desc = '
                   "Volume capabilities MULTI_NODE_MULTI_WRITER not supported. Only AccessModes[ReadWriteOnce] "
                   "supported.")


def _play_provisioner_refusing_rwx(cluster: LocalCluster, kubectl: Kubectl, klass: str) -> None:
    """No CSI driver runs here: the test plays one that cannot provide ReadWriteMany, posting the
    ProvisioningFailed event its external-provisioner would post on the claim."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": klass},
        "provisioner": "ebs.csi.example.com", "volumeBindingMode": "Immediate"}))
    claim = eventually(lambda: next(iter(_items(kubectl, "persistentvolumeclaims")), None), timeout=120,
                       what="the cache claim")
    kubectl.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "claim-"},
        "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim["metadata"]["name"],
                           "namespace": kubectl.namespace, "uid": claim["metadata"]["uid"]},
        "type": "Warning", "reason": "ProvisioningFailed", "message": EBS_RWX_REFUSAL.format(klass=klass),
        "source": {"component": "ebs.csi.example.com_csi-provisioner"}}))


@pytest.mark.parametrize(("case", "reason"), [
    ("gated", "GatedModelNeedsToken"),
    ("missing", "ModelNotFound"),
    ("no-storage-class", "StorageClassNotFound"),
    ("rwx-unsupported", "AccessModeUnsupported"),
])
def test_failures_end_in_their_own_condition_and_nothing_serves(
        cluster: LocalCluster, operator: OperatorProcess, kubectl: Kubectl, hub: HubThread,
        storage: tuple[str, pathlib.Path], runner: LocalPodRunner, case: str, reason: str) -> None:
    storage_class, _ = storage
    repo = {"gated": "tiny/gated", "missing": "tiny/missing"}.get(case, REPO)
    klass = {"no-storage-class": "does-not-exist", "rwx-unsupported": f"rwo-only-{kubectl.namespace}"}.get(
        case, storage_class)
    kubectl.apply_yaml(manifest(case, repo=repo, storage_class=klass, hub=hub.url))
    if case == "rwx-unsupported":
        _play_provisioner_refusing_rwx(cluster, kubectl, klass)

    def failed() -> dict[str, Any] | None:
        st = _status(kubectl, case)
        return st if st.get("phase") == "Failed" else None

    st = eventually(failed, timeout=180, what=f"{case} to fail")
    degraded, cached = _condition(st, "Degraded"), _condition(st, "ModelCached")
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert (cached["status"], cached["reason"]) == ("False", reason)
    assert len(degraded["message"]) > 20 and (repo in degraded["message"] or klass in degraded["message"])
    print(f"{case}: {reason}: {degraded['message']}")
    assert _condition(st, "Ready")["status"] == "False"
    assert not _items(kubectl, "deployments") and not _items(kubectl, "services")
    if case == "no-storage-class":
        assert not _items(kubectl, "persistentvolumeclaims") and not _items(kubectl, "jobs")
    elif case == "rwx-unsupported":
        assert not [p for p in _items(kubectl, "pods") if p["status"].get("phase") == "Running"]
        cluster.kubectl("delete", "storageclass", klass, "--wait=false", check=False)
    else:
        # The Job failed at once (exit 2 matches its podFailurePolicy): one attempt, no retries.
        pods = kubectl.get("pods", selector="shardwise.io/model-cache")["items"]
        assert [p["status"]["phase"] for p in pods] == ["Failed"]


def test_adding_a_token_to_a_gated_model_retries_and_only_the_downloader_sees_it(
        operator: OperatorProcess, kubectl: Kubectl, hub: HubThread, storage: tuple[str, pathlib.Path],
        runner: LocalPodRunner) -> None:
    storage_class, _ = storage
    kubectl.apply_yaml(manifest("gated", repo="tiny/gated", storage_class=storage_class, hub=hub.url))
    eventually(lambda: _status(kubectl, "gated").get("phase") == "Failed", timeout=180, what="gated to fail")
    kubectl.run("create", "secret", "generic", "hf", "--from-literal=token=hf_allowed")
    kubectl.apply_yaml(manifest("gated", repo="tiny/gated", storage_class=storage_class, hub=hub.url,
                                extra="    hfTokenSecretRef: {name: hf}"))
    eventually(lambda: _status(kubectl, "gated").get("phase") == "Ready", timeout=240,
               what="the download retried with the token and the deployment Ready")
    job = _items(kubectl, "jobs")[0]
    assert any(e.get("name") == "HF_TOKEN" for e in job["spec"]["template"]["spec"]["containers"][0]["env"])
    serving = _items(kubectl, "deployments")[0]["spec"]["template"]["spec"]["containers"][0]
    assert not any(e.get("name") == "HF_TOKEN" for e in serving.get("env") or [])


def test_a_new_revision_never_touches_the_running_workload_until_its_weights_are_verified(
        cluster: LocalCluster, operator: OperatorProcess, kubectl: Kubectl, hub: HubThread,
        storage: tuple[str, pathlib.Path], runner: LocalPodRunner, tmp_path: pathlib.Path) -> None:
    storage_class, _ = storage
    kubectl.apply_yaml(manifest("pinned", storage_class=storage_class, hub=hub.url))
    ready = eventually(lambda: (st := _status(kubectl, "pinned")).get("phase") == "Ready" and st, timeout=240,
                       what="the first revision served")
    first_claim, commit = ready["modelCache"]["claim"], ready["modelCache"]["commit"]
    template = _items(kubectl, "deployments")[0]["spec"]["template"]

    # The spec asks for the commit by hash: a new cache, whose claim waits for a volume.
    kubectl.apply_yaml(manifest("pinned", storage_class=storage_class, hub=hub.url,
                                extra=f"    revision: {commit}"))
    waiting = eventually(lambda: (st := _status(kubectl, "pinned")).get("modelCache", {}).get("claim") != first_claim
                         and st, timeout=60, what="the new revision's cache")
    assert waiting["phase"] == "Pending" and waiting["readyReplicas"] == 1, waiting["conditions"]
    assert _items(kubectl, "deployments")[0]["spec"]["template"] == template, "the running workload changed"

    folder = tmp_path / "volume-2"
    folder.mkdir()
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{storage_class}-2"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder)}}}))
    try:
        def moved() -> bool:
            pod = _items(kubectl, "deployments")[0]["spec"]["template"]["spec"]
            return any((v.get("persistentVolumeClaim") or {}).get("claimName") == waiting["modelCache"]["claim"]
                       for v in pod["volumes"])

        eventually(moved, timeout=240, what="the workload moved to the new revision's verified cache")
        assert _status(kubectl, "pinned")["modelCache"]["commit"] == commit
    finally:
        cluster.kubectl("delete", "pv", f"{storage_class}-2", "--wait=false", check=False)
