"""The model weight cache as plain data: which cache a spec uses, its claim and downloader Job, and
how serving pods mount it.

One cache per (namespace, model, revision, storage class, access mode), named by a hash of those,
so every InferenceDeployment asking for the same weights finds the same claim and one download
serves them all. The claim has no owner reference (several deployments share it); the operator
removes it after a grace period once no deployment uses it (controller/modelcache.py). The Job is
owned by the claim, so it goes with it.

The downloader pod runs with least privilege: no service account token, non-root, no privilege
escalation, every capability dropped, and it alone gets the hub token. It reports progress on an
HTTP port (scraped like the engines' /metrics) and its outcome as the termination message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec

CACHE_LABEL = "shardwise.io/model-cache"  # value: the cache key; also on the downloader pod
COMPONENT = "model-cache"
MODEL_ANNOTATION = "shardwise.io/model"
REVISION_ANNOTATION = "shardwise.io/revision"
COMMIT_ANNOTATION = "shardwise.io/commit"
PHASE_ANNOTATION = "shardwise.io/cache-phase"
BYTES_ANNOTATION = "shardwise.io/cache-bytes"
UNUSED_SINCE_ANNOTATION = "shardwise.io/unused-since"
KEEP_ANNOTATION = "shardwise.io/keep"

CACHE_MOUNT = "/model-cache"
MODEL_SUBDIR = "model"
PROGRESS_PORT = 8001
DOWNLOADER_COMMAND = ["shardwise-download"]
DEFAULT_MODE = "Cluster"
GIB = 1024**3
SIZE_MARGIN = 0.15

# Assumed bandwidths for the expected start time of a serving pod (overridden by nothing yet;
# docs/model-cache.md says where they come from): reading safetensors from a cache volume into
# GPU memory, and fetching from the hub when there is no cache.
LOAD_BYTES_PER_S = 500e6
HUB_BYTES_PER_S = 100e6
ENGINE_START_S = 60.0


@dataclasses.dataclass(frozen=True)
class CacheRef:
    """The cache one InferenceDeployment uses; `mode` None means serving pods fetch from the hub."""

    mode: str  # Cluster | PVC | None
    claim: str | None = None
    path: str = ""  # folder inside the claim holding the model files
    key: str | None = None
    model: str = ""
    revision: str = "main"
    storage_class: str | None = None
    access_mode: str = "ReadWriteMany"
    size: str | None = None
    endpoint: str | None = None
    keep: bool = False

    @property
    def job(self) -> str | None:
        return f"{self.claim}-download" if self.mode == "Cluster" and self.claim else None

    @property
    def model_path(self) -> str:
        """Where serving pods find the files."""
        return f"{CACHE_MOUNT}/{self.path}".rstrip("/")


def is_hub_repo(name: str) -> bool:
    """A hub repository id (org/name), as opposed to a path inside the image."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/"))


def cache_key(model: str, revision: str, storage_class: str | None, access_mode: str) -> str:
    text = "\0".join((model, revision, storage_class or "", access_mode))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def resolve(spec: InferenceDeploymentSpec, *, default_mode: str = DEFAULT_MODE,
            default_storage_class: str | None = None, default_endpoint: str | None = None) -> CacheRef:
    cache = spec.model.cache
    mode = cache.mode.value if cache.mode is not None else default_mode
    revision = spec.model.revision or "main"
    endpoint = cache.hubEndpoint or default_endpoint
    if mode == "PVC":
        return CacheRef("PVC", claim=cache.claimName, path=cache.path.strip("/"), model=spec.model.name,
                        revision=revision, endpoint=endpoint)
    if mode == "None" or not is_hub_repo(spec.model.name):
        return CacheRef("None", model=spec.model.name, revision=revision, endpoint=endpoint)
    storage_class = cache.storageClassName or default_storage_class
    key = cache_key(spec.model.name, revision, storage_class, cache.accessMode)
    return CacheRef("Cluster", claim=f"model-cache-{key}", path=MODEL_SUBDIR, key=key, model=spec.model.name,
                    revision=revision, storage_class=storage_class, access_mode=cache.accessMode, size=cache.size,
                    endpoint=endpoint, keep=cache.keep)


def weight_bytes(plan: dict[str, Any]) -> int:
    """The model's weight bytes, from the plan's per-GPU weights and its layout (a DP plan says
    the whole model's: its ranks each hold their own attention weights)."""
    memory = plan.get("memory") if isinstance(plan.get("memory"), dict) else {}
    if memory.get("weightsGiB"):
        return int(float(memory["weightsGiB"]) * GIB)
    per_gpu = float(memory.get("weightsGiBPerGPU") or 0.0)
    return int(per_gpu * int(plan.get("tensorParallel") or 1) * int(plan.get("pipelineParallel") or 1) * GIB)


def claim_size(weights: int) -> str:
    """Weight bytes plus 15 % and 1 GiB (config, tokenizer, part files), in whole GiB."""
    return f"{max(1, math.ceil((weights * (1 + SIZE_MARGIN) + GIB) / GIB))}Gi"


def expected_start_seconds(weights: int, *, cached: bool) -> float:
    """How long a new serving pod should take to serve: engine start plus reading the weights from
    the cache, or fetching them from the hub first when there is none."""
    load = weights / LOAD_BYTES_PER_S
    return ENGINE_START_S + load + (0.0 if cached else weights / HUB_BYTES_PER_S)


def cache_labels(ref: CacheRef) -> dict[str, str]:
    return {CACHE_LABEL: ref.key or "", "app.kubernetes.io/component": COMPONENT,
            "app.kubernetes.io/managed-by": "shardwise"}


def build_claim(ref: CacheRef, namespace: str, weights: int) -> dict[str, Any]:
    annotations = {MODEL_ANNOTATION: ref.model, REVISION_ANNOTATION: ref.revision}
    if ref.keep:
        annotations[KEEP_ANNOTATION] = "true"
    spec: dict[str, Any] = {
        "accessModes": [ref.access_mode],
        "resources": {"requests": {"storage": ref.size or claim_size(weights)}},
    }
    if ref.storage_class:
        spec["storageClassName"] = ref.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": ref.claim, "namespace": namespace, "labels": cache_labels(ref),
                         "annotations": annotations},
            "spec": spec}


def build_job(ref: CacheRef, namespace: str, claim_uid: str, *, image: str,
              token_secret: tuple[str, str] | None) -> dict[str, Any]:
    """The downloader Job, owned by the claim it fills."""
    # A read-only root filesystem: the client's own small files go to an emptyDir.
    env: list[dict[str, Any]] = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
                                 {"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf"}]
    if ref.endpoint:
        env.append({"name": "HF_ENDPOINT", "value": ref.endpoint})
    if token_secret is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token_secret[0],
                                                                       "key": token_secret[1]}}})
    container = {
        "name": "download",
        "image": image,
        "command": DOWNLOADER_COMMAND,
        "args": ["--repo", ref.model, "--revision", ref.revision, "--dest", f"{CACHE_MOUNT}/{MODEL_SUBDIR}",
                 "--port", str(PROGRESS_PORT)],
        "env": env,
        "ports": [{"name": "progress", "containerPort": PROGRESS_PORT, "protocol": "TCP"}],
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": ref.job, "namespace": namespace, "labels": cache_labels(ref),
                     "annotations": {MODEL_ANNOTATION: ref.model, REVISION_ANNOTATION: ref.revision},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": ref.claim,
                                          "uid": claim_uid, "blockOwnerDeletion": True}]},
        "spec": {
            "backoffLimit": 6,
            # Gated, not found, no space: retrying cannot help, so the Job fails at once. Anything
            # else (a killed pod, a network error) retries, and the retry resumes.
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "download", "operator": "In",
                                                      "values": [2]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {
                "metadata": {"labels": cache_labels(ref)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "fsGroup": 1000},
                    "containers": [container],
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": ref.claim}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                },
            },
        },
    }


def serving_pod_changes(pod: dict[str, Any], ref: CacheRef) -> dict[str, Any]:
    """A serving pod spec that loads from the cache: the claim mounted read-only, `vllm serve`
    pointed at the path, the hub off, and no hub token (only the downloader sees it)."""
    if ref.mode == "None":
        if ref.endpoint:
            for container in pod["containers"]:
                container.setdefault("env", []).append({"name": "HF_ENDPOINT", "value": ref.endpoint})
        return pod
    pod.setdefault("volumes", []).append(
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": ref.claim, "readOnly": True}})
    for container in pod["containers"]:
        container.setdefault("volumeMounts", []).append(
            {"name": "model-cache", "mountPath": CACHE_MOUNT, "readOnly": True})
        container["env"] = [e for e in container.get("env") or [] if e.get("name") != "HF_TOKEN"]
        container["env"].append({"name": "HF_HUB_OFFLINE", "value": "1"})
        container["args"] = [ref.model_path if a == ref.model else a for a in container.get("args") or []]
    return pod


def startup_failures(expected_start_s: float, period_s: int, *, floor: int) -> int:
    """Startup probe failures allowed: twice the expected start, never below `floor`."""
    return max(floor, math.ceil(2 * expected_start_s / period_s))


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Deployment":
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "LeaderWorkerSet":
        templates = obj["spec"]["leaderWorkerTemplate"]
        return [t["spec"] for t in (templates.get("leaderTemplate"), templates.get("workerTemplate")) if t]
    return []


def apply_to_workloads(objs: list[dict[str, Any]], ref: CacheRef | None,
                       expected_start_s: float | None) -> list[dict[str, Any]]:
    """Serving pods load from the cache; their startup probes allow the expected start time."""
    for obj in objs:
        for pod in _pod_specs(obj):
            if ref is not None:
                serving_pod_changes(pod, ref)
            if expected_start_s is None:
                continue
            cached = ref is not None and ref.mode != "None"
            for container in pod["containers"]:
                probe = container.get("startupProbe")
                if probe:
                    # Without a cache keep today's 30-minute floor (a download is in the start).
                    probe["failureThreshold"] = startup_failures(expected_start_s, probe["periodSeconds"],
                                                                 floor=30 if cached else probe["failureThreshold"])
    return objs
