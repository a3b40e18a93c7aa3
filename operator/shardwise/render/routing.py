"""The standard routing objects of one InferenceDeployment: an InferencePool and an HTTPRoute.

Clusters that run a Gateway API Inference Extension (GIE) gateway (Istio, agentgateway, NGINX
Gateway Fabric, ...) route to models through `inference.networking.k8s.io/v1` InferencePools: a
label selector of model-server pods, their port, and the endpoint picker (EPP) the gateway asks,
per request, which of them serves it (GIE v1.5.0 api/v1/inferencepool_types.go). spec.routing
makes shardwise own one per deployment, so its selector follows shardwise's labels by
construction: the pool names the serving pods by label, never by address, so scaling, rollouts
and re-plans change its endpoints and never its spec (only a move between one node and several
does, when the leaders alone serve). The optional HTTPRoute is the GIE convention for choosing
the pool by model: the body-based router (BBR) sets `X-Gateway-Base-Model-Name` from the body's
`model`, and the route matches that header exactly.

BBR does not copy the name as it is: since GIE v1.5.0 (pkg/bbr/plugins/basemodelextractor) it
looks the body's model up in ConfigMaps labelled `inference.networking.k8s.io/bbr-managed: "true"`
(`baseModel`, and `adapters`: the LoRA adapters served on it) and sets the header to the base
model found, or to "" for a model no ConfigMap names, so no route matches. Each pool therefore
comes with such a ConfigMap: the served name, and the deployment's adapters, whose requests go to
the base model's pool (found by tests/e2e/test_gie_gateway.py against the upstream BBR).
"""

from __future__ import annotations

from typing import Any

import yaml

from shardwise.api import names
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import labels, leaderworkerset
from shardwise.render.pod import Owner, object_metadata
from shardwise.render.vllm_args import VLLM_PORT

POOL_API_VERSION = "inference.networking.k8s.io/v1"
POOL_KIND = "InferencePool"
POOL_PLURAL = "inferencepools"
ROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
ROUTE_KIND = "HTTPRoute"
ROUTE_PLURAL = "httproutes"
MODEL_HEADER = "X-Gateway-Base-Model-Name"
BBR_CONFIGMAP_KIND = "ConfigMap"
BBR_MANAGED_LABEL = "inference.networking.k8s.io/bbr-managed"


def serving_selector(name: str, plan: dict[str, Any]) -> dict[str, str]:
    """The pods that answer HTTP: every pod of a one-node replica, the leaders of a multi-node one."""
    if int(plan.get("nodesPerReplica") or 1) > 1:
        return leaderworkerset.leader_selector(name)
    return labels.selector_labels(name)


def served_name(owner: Owner, spec: InferenceDeploymentSpec) -> str:
    return spec.model.servedName or owner.name


def pool_enabled(spec: InferenceDeploymentSpec) -> bool:
    return spec.routing is not None and spec.routing.inferencePool is not None and spec.routing.inferencePool.enabled


def route_enabled(spec: InferenceDeploymentSpec) -> bool:
    return pool_enabled(spec) and spec.routing is not None and spec.routing.httpRoute is not None


def build_inference_pool(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> dict[str, Any]:
    assert spec.routing is not None and spec.routing.inferencePool is not None
    picker = spec.routing.inferencePool.endpointPicker
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL_KIND,
        "metadata": object_metadata(owner, names.inference_pool_name(owner.name)),
        "spec": {
            "selector": {"matchLabels": serving_selector(owner.name, plan)},
            "targetPorts": [{"number": VLLM_PORT}],
            "appProtocol": "http",
            "endpointPickerRef": {"kind": "Service", "name": picker.name, "port": {"number": picker.port},
                                  "failureMode": picker.failureMode.value},
        },
    }


def build_http_route(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    assert spec.routing is not None and spec.routing.httpRoute is not None
    gateway = spec.routing.httpRoute.gatewayRef
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.sectionName:
        parent["sectionName"] = gateway.sectionName
    return {
        "apiVersion": ROUTE_API_VERSION,
        "kind": ROUTE_KIND,
        "metadata": object_metadata(owner, names.http_route_name(owner.name)),
        "spec": {
            "parentRefs": [parent],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"},
                             "headers": [{"type": "Exact", "name": MODEL_HEADER,
                                          "value": served_name(owner, spec)}]}],
                "backendRefs": [{"group": "inference.networking.k8s.io", "kind": POOL_KIND,
                                 "name": names.inference_pool_name(owner.name)}],
            }],
        },
    }


def build_bbr_models(owner: Owner, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """The body-based router's entry for this pool's model names (the base model and its adapters)."""
    metadata = object_metadata(owner, names.bbr_configmap_name(owner.name))
    metadata["labels"] = {**metadata.get("labels", {}), BBR_MANAGED_LABEL: "true"}
    data = {"baseModel": served_name(owner, spec)}
    if spec.adapters:
        data["adapters"] = yaml.safe_dump([a.name for a in spec.adapters], default_flow_style=False)
    return {"apiVersion": "v1", "kind": BBR_CONFIGMAP_KIND, "metadata": metadata, "data": data}


def render(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The routing children spec.routing asks for, in apply order (the pool before its route)."""
    out = []
    if pool_enabled(spec):
        out.append(build_inference_pool(owner, spec, plan))
        out.append(build_bbr_models(owner, spec))
    if route_enabled(spec):
        out.append(build_http_route(owner, spec))
    return out


def candidates(name: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every routing child a resource may own."""
    return [(POOL_API_VERSION, POOL_KIND, names.inference_pool_name(name)),
            (ROUTE_API_VERSION, ROUTE_KIND, names.http_route_name(name)),
            ("v1", BBR_CONFIGMAP_KIND, names.bbr_configmap_name(name))]
