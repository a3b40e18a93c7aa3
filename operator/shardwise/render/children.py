"""Build the serving workload and its Service for one InferenceDeployment.

A replica that fits on one node is a pod of a Deployment; one that spans nodes is a pod group of
a LeaderWorkerSet (`leaderworkerset`). `render` returns the objects in the order they should be
applied. Probes are sized from the model's weights (`probes`): the startup probe allows as long as
the weights need to load before liveness takes over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.api import names
from shardwise.api.v1alpha1 import GROUP, KIND, VERSION, InferenceDeploymentSpec
from shardwise.planner import models
from shardwise.render import labels, leaderworkerset, modelcache, probes
from shardwise.render.vllm_args import VLLM_PORT, build_serve_args

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


def build_deployment(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any],
                     replicas: int) -> dict[str, Any]:
    selector = labels.selector_labels(owner.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(owner, names.deployment_name(owner.name)),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            # Surge one replica and never drop below the ready count: a rollout needs one
            # replica's worth of free GPUs, and serving never stops during it.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels.common_labels(owner.name), "annotations": pod_annotations(spec, plan)},
                "spec": build_pod_spec(owner, spec, plan, command=["vllm", "serve"],
                                       args=build_serve_args(spec, plan, owner.name)),
            },
        },
    }


def build_service(owner: Owner, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(owner, names.service_name(owner.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any], replicas: int, *,
           runtime_image: str | None = None, cache: modelcache.CacheRef | None = None,
           expected_start_s: float | None = None) -> list[dict[str, Any]]:
    """Every child the InferenceDeployment should have, in apply order.

    `runtime_image` (the operator's setting) replaces the default vLLM image in multi-node pods,
    which need shardwise-launch; single-node pods run `vllm serve` and keep the spec's image.
    `cache` mounts the model cache into the serving pods; `expected_start_s` sizes the startup probe.
    """
    if int(plan["nodesPerReplica"]) > 1:
        out = [
            leaderworkerset.build_leaderworkerset(owner, spec, plan, replicas, runtime_image=runtime_image),
            build_service(owner, leaderworkerset.leader_selector(owner.name)),
        ]
    else:
        out = [
            build_deployment(owner, spec, plan, replicas),
            build_service(owner, labels.selector_labels(owner.name)),
        ]
    return [with_progress_deadline(o) for o in modelcache.apply_to_workloads(out, cache, expected_start_s)]


# Beyond the startup probe's own budget: a rollout may also wait this long for a surge pod's GPUs.
PROGRESS_MARGIN_S = 600


def with_progress_deadline(obj: dict[str, Any]) -> dict[str, Any]:
    """A Deployment's progressDeadlineSeconds outlasts its startup probe's budget.

    Kubernetes' default (600 s) is shorter than loading a large model, and the operator reports
    Progressing=False/ProgressDeadlineExceeded as a failure: the deadline must only fire when the
    kubelet would already have given up on the container.
    """
    if obj.get("kind") != "Deployment":
        return obj
    budget = 0
    for container in obj["spec"]["template"]["spec"]["containers"]:
        probe = container.get("startupProbe") or {}
        budget = max(budget, int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3)))
    obj["spec"]["progressDeadlineSeconds"] = max(600, budget + PROGRESS_MARGIN_S)
    return obj


def workload_candidates(name: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every workload a resource may own, whichever the plan chose."""
    return [("apps/v1", "Deployment", names.deployment_name(name)),
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", leaderworkerset.workload_name(name))]


def endpoint(owner: Owner) -> str:
    return f"http://{names.service_name(owner.name)}.{owner.namespace}.svc:{VLLM_PORT}/v1"
