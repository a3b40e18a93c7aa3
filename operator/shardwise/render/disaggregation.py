"""The two workloads of a disaggregated InferenceDeployment: a prefill and a decode Deployment.

Each role is the aggregated Deployment with its own name, a `shardwise.io/role` label, its own
replicas and tensor-parallel degree, and vLLM's `--kv-transfer-config` for its role. What the
JSON holds is vLLM 0.32's `KVTransferConfig` (vllm/config/kv_transfer.py): `kv_connector`,
`kv_role` and `kv_connector_extra_config`, nothing else, so every other key keeps vLLM's default.

Roles per connector, from the connectors' sources in the 0.32 wheel:
- ExampleConnector saves KV as files under `shared_storage_path` when the engine is a producer
  and looks for them when it is a consumer (example_connector.py): prefill `kv_producer`, decode
  `kv_consumer`, both mounting the same ReadWriteMany claim at the same path.
- NixlConnector and LMCacheConnectorV1 move KV per request, driven by the `kv_transfer_params`
  a router passes (SERVING-SHAPES.md C): both roles `kv_both` (for NIXL "effectively a
  placeholder"), so an engine of either role can also serve a request alone.

The Service keeps its name and selects the decode pods only: a request that reaches the model
without a P/D router is served whole by a decode engine (it prefills itself), never refused.
The prefill pods get a Service of their own for the router.

Only single-node roles are rendered: a role that needs more nodes than one is the planner's to
refuse (disaggregation plans size each role on one node).
"""

from __future__ import annotations

import json
from typing import Any

from shardwise.api import names
from shardwise.api.v1alpha1 import DisaggregationSpec, InferenceDeploymentSpec, KVConnector
from shardwise.render import labels
from shardwise.render.pod import Owner, build_pod_spec, object_metadata, pod_annotations
from shardwise.render.vllm_args import VLLM_PORT, build_serve_args

ROLE_LABEL = "shardwise.io/role"
PREFILL = "prefill"
DECODE = "decode"
ROLES = (PREFILL, DECODE)
KV_VOLUME = "kv-transfer"
# Auto: the connector GPUs with RDMA or NVLink use (vLLM's NixlConnector guide).
AUTO_CONNECTOR = KVConnector.NixlConnector


def enabled(spec: InferenceDeploymentSpec) -> bool:
    return spec.disaggregation is not None and spec.disaggregation.mode.value == "Disaggregated"


def connector_name(d: DisaggregationSpec) -> str:
    return (AUTO_CONNECTOR if d.connector is KVConnector.Auto else d.connector).value


def kv_transfer_config(d: DisaggregationSpec, role: str) -> dict[str, Any]:
    """vLLM's --kv-transfer-config for one role, as a dict (rendered as compact JSON)."""
    name = connector_name(d)
    if name == KVConnector.ExampleConnector.value:
        return {"kv_connector": name, "kv_role": "kv_producer" if role == PREFILL else "kv_consumer",
                "kv_connector_extra_config": {"shared_storage_path": d.sharedStorage.path}}
    return {"kv_connector": name, "kv_role": "kv_both"}


def role_name(name: str, role: str) -> str:
    return f"{names.deployment_name(name)}-{role}"


def role_selector(name: str, role: str) -> dict[str, str]:
    return {**labels.selector_labels(name), ROLE_LABEL: role}


def role_plan(plan: dict[str, Any], tensor: int | None) -> dict[str, Any]:
    """The plan with the role's tensor-parallel degree (one node, no pipeline) when it sets one."""
    if tensor is None:
        return plan
    return {**plan, "tensorParallel": tensor, "pipelineParallel": 1, "gpusPerReplica": tensor,
            "gpusPerNode": tensor, "nodesPerReplica": 1}


def role_serve_args(spec: InferenceDeploymentSpec, plan: dict[str, Any], resource_name: str,
                    role: str) -> list[str]:
    """Arguments after `vllm serve` for one role: the aggregated ones plus --kv-transfer-config."""
    d = spec.disaggregation
    assert d is not None
    config = json.dumps(kv_transfer_config(d, role), separators=(",", ":"), sort_keys=True)
    return [*build_serve_args(spec, plan, resource_name), "--kv-transfer-config", config]


def _with_shared_storage(pod: dict[str, Any], d: DisaggregationSpec) -> dict[str, Any]:
    if connector_name(d) != KVConnector.ExampleConnector.value or not d.sharedStorage.claimName:
        return pod
    pod["volumes"] = [*pod.get("volumes", []), {
        "name": KV_VOLUME, "persistentVolumeClaim": {"claimName": d.sharedStorage.claimName}}]
    for container in pod["containers"]:
        container["volumeMounts"] = [*container.get("volumeMounts", []),
                                     {"name": KV_VOLUME, "mountPath": d.sharedStorage.path}]
    return pod


def _with_nixl_host(pod: dict[str, Any], d: DisaggregationSpec) -> dict[str, Any]:
    # NIXL's side channel binds localhost unless told otherwise ("Set when prefiller and decoder
    # are on different machines"): the pod's own IP.
    if connector_name(d) != KVConnector.NixlConnector.value:
        return pod
    for container in pod["containers"]:
        container["env"] = [*container.get("env", []), {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    return pod


# Weight of the preference (1-100) for a node that already runs the other role: the scheduler's
# other scores (spreading, GPU fit) still count, but a free node beside the partner wins ties.
PAIR_AFFINITY_WEIGHT = 100


def _near_the_other_role(pod: dict[str, Any], name: str, role: str) -> dict[str, Any]:
    """Prefer a node running the other role: the KV hand-off then stays on NVLink or PCIe instead
    of the network (Dynamo's issue 10171: ~50 % of the throughput lost when pairs straddle nodes;
    the planner costs the hand-off on the same assumption). Preferred, not required: a pair that
    cannot share a node still serves."""
    other = DECODE if role == PREFILL else PREFILL
    affinity = pod.setdefault("affinity", {})
    affinity.setdefault("podAffinity", {}).setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append({
        "weight": PAIR_AFFINITY_WEIGHT,
        "podAffinityTerm": {"labelSelector": {"matchLabels": role_selector(name, other)},
                            "topologyKey": "kubernetes.io/hostname"}})
    return pod


def build_role_deployment(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any],
                          role: str) -> dict[str, Any]:
    d = spec.disaggregation
    assert d is not None
    role_spec = d.prefill if role == PREFILL else d.decode
    planned = role_plan(plan, role_spec.tensor)
    selector = role_selector(owner.name, role)
    pod = build_pod_spec(owner, spec, planned, command=["vllm", "serve"],
                         args=role_serve_args(spec, planned, owner.name, role))
    pod = _near_the_other_role(_with_nixl_host(_with_shared_storage(pod, d), d), owner.name, role)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(owner, role_name(owner.name, role)),
        "spec": {
            "replicas": role_spec.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {**labels.common_labels(owner.name), ROLE_LABEL: role},
                             "annotations": pod_annotations(spec, planned)},
                "spec": pod,
            },
        },
    }


def build_role_service(owner: Owner, service_name: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(owner, service_name),
        "spec": {
            "type": "ClusterIP",
            "selector": role_selector(owner.name, role),
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Both roles' Deployments, the model's Service (decode pods) and the prefill Service."""
    return [
        build_role_deployment(owner, spec, plan, PREFILL),
        build_role_deployment(owner, spec, plan, DECODE),
        build_role_service(owner, names.service_name(owner.name), DECODE),
        build_role_service(owner, role_name(owner.name, PREFILL), PREFILL),
    ]
