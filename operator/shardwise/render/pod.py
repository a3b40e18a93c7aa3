"""The pod every serving replica runs, and the metadata every child carries.

Shared by the Deployment (`children`) and the LeaderWorkerSet (`leaderworkerset`) renderers, so
neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.api import lora
from shardwise.api.v1alpha1 import GROUP, KIND, VERSION, InferenceDeploymentSpec
from shardwise.planner import models
from shardwise.render import labels, probes
from shardwise.render.vllm_args import VLLM_PORT

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
SHM_SIZE = "16Gi"  # NCCL needs far more than the container default of 64 MiB for multi-GPU.


@dataclass(frozen=True)
class Owner:
    """What the children need to know about the InferenceDeployment that owns them."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def object_metadata(owner: Owner, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels.common_labels(owner.name),
        "ownerReferences": [owner.reference()],
    }


def _affinity(plan: dict[str, Any]) -> dict[str, Any] | None:
    product = plan.get("gpuProduct")
    if not product:
        return None
    term = {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [product]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _env(spec: InferenceDeploymentSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if lora.limits(spec) is not None:
        env.append(dict(lora.RUNTIME_UPDATES_ENV))
    ref = spec.model.hfTokenSecretRef
    if ref is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def pod_annotations(spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> dict[str, str]:
    """Facts about what the pod serves (not predictions: those change with every re-plan and
    would roll the pods); the simulated engine sizes its measured latencies from them."""
    out = {labels.MAX_CONCURRENCY_ANNOTATION: str(spec.serving.maxConcurrency)}
    parameters = _active_parameters(spec)
    if parameters:
        out[labels.MODEL_PARAMETERS_ANNOTATION] = str(int(parameters))
    return out


def _active_parameters(spec: InferenceDeploymentSpec) -> float | None:
    given = spec.model.architecture
    if given is not None and (given.activeParameters or given.parameters):
        return float(given.activeParameters or given.parameters or 0)
    arch = models.lookup_model(spec.model.name)
    return arch.active_parameters if arch else None


def build_pod_spec(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any],
                   *, command: list[str], args: list[str]) -> dict[str, Any]:
    gpus = str(plan["gpusPerNode"])
    pod: dict[str, Any] = {
        "containers": [{
            "name": "vllm",
            "image": spec.serving.image,
            "command": command,
            "args": args,
            "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
            "env": _env(spec),
            "resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            # Sized from the plan's weights (render/probes.py): a 405B must not die loading.
            **probes.probes(plan, spec.serving.modelLoadMiBps),
        }],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}],
        "terminationGracePeriodSeconds": 60,
    }
    affinity = _affinity(plan)
    if affinity:
        pod["affinity"] = affinity
    if spec.placement.nodeSelector:
        pod["nodeSelector"] = dict(spec.placement.nodeSelector)
    if spec.placement.tolerations:
        pod["tolerations"] = [t.model_dump(exclude_none=True) for t in spec.placement.tolerations]
    return pod
