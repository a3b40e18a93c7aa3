"""Build the serving workload and its Service for one InferenceDeployment.

A replica that fits on one node is a pod of a Deployment; one that spans nodes is a pod group of
a LeaderWorkerSet (`leaderworkerset`). `render` returns the objects in the order they should be
applied. Probes are sized from the model's weights (`probes`): the startup probe allows as long as
the weights need to load before liveness takes over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.api import names
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import disaggregation, engine, labels, leaderworkerset, modelcache, trtllm_args
# Owner and the pod builders live in `pod`; they stay importable from here, where render() takes them.
from shardwise.render.pod import Owner, build_pod_spec, object_metadata, pod_annotations
from shardwise.render.vllm_args import VLLM_PORT, build_serve_args

def _pod(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> dict[str, Any]:
    command, args = engine.command_and_args(spec, plan, owner.name)
    return build_pod_spec(owner, spec, plan, command=command, args=args)


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
                "spec": _pod(owner, spec, plan),
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
           expected_start_s: float | None = None,
           engine_images: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every child the InferenceDeployment should have, in apply order.

    `runtime_image` (the operator's setting) replaces the default vLLM image in multi-node pods,
    which need shardwise-launch; single-node pods run `vllm serve` and keep the spec's image.
    `cache` mounts the model cache into the serving pods; `expected_start_s` sizes the startup probe.
    `engine_images` (the operator's settings, by engine name) replace the default image for SGLang
    and TensorRT-LLM pods (render/engine.py).
    """
    if disaggregation.enabled(spec):
        # Each role's own replicas: spec.disaggregation's, not the aggregated count.
        out = disaggregation.render(owner, spec, plan)
    elif int(plan["nodesPerReplica"]) > 1:
        out = [
            leaderworkerset.build_leaderworkerset(owner, spec, plan, replicas, runtime_image=runtime_image),
            build_service(owner, leaderworkerset.leader_selector(owner.name)),
        ]
    else:
        out = [
            build_deployment(owner, spec, plan, replicas),
            build_service(owner, labels.selector_labels(owner.name)),
        ]
    out = engine.apply_to_workloads(out, spec, plan, owner.name,
                                    object_metadata(owner, trtllm_args.options_configmap_name(owner.name)), engine_images)
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
