"""Generate the InferenceDeployment CRD from the pydantic models.

pydantic emits JSON Schema with `$ref`s, `anyOf: [X, null]` for optionals and `title`s; a
structural CRD schema allows none of those, so we inline references, unwrap optionals and drop
titles. Everything else (descriptions, defaults, enums, bounds, CEL rules) passes through.
"""

from __future__ import annotations

from typing import Any

import yaml

from shardwise.api import apikeys, names
from shardwise.api.columns import column
from shardwise.api import v1alpha1 as api

_DROP = {"title"}


def _openapi(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_openapi(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _openapi(merged, defs)
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        if len(variants) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if rest.get("default", ...) is None:
                rest.pop("default")
            return _openapi({**variants[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _openapi(prop, defs) for name, prop in value.items()}
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020 puts the bound here; OpenAPI v3 wants the bound plus a flag.
            out[key.replace("exclusiveM", "m")] = value
            out[key] = True
        elif key == "additionalProperties" and value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out[key] = _openapi(value, defs)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(mode="serialization", by_alias=True)
    return _openapi(raw, raw.get("$defs", {}))


def _printer_columns() -> list[dict[str, Any]]:
    """`kubectl get infd`: what a person scans for by default, within 120 columns with `-A` for
    the demo fleet (tests/unit/api/test_printer_columns.py); the rest at priority 1 (`-o wide`)."""

    def col(name: str, type_: str, path: str, description: str, priority: int = 0) -> dict[str, Any]:
        return column(name, type_, path, description=description, priority=priority)

    return [
        col("Model", "string", ".spec.model.name", "The model served."),
        col("Layout", "string", ".status.plan.layout", "Planned layout: data x tensor x pipeline parallel and expert parallel size (TP8xPP1, TP8xEP8, DP2xTP4xEP8)."),
        col("Ready", "integer", ".status.readyReplicas", "Replicas ready to serve."),
        col("TTFT", "number", ".status.latency.ttftP95Ms", "Time to first token, p95 over the window, ms."),
        col("USD/h", "number", ".status.cost.hourlyUSD", "GPU cost per hour."),
        col("Phase", "string", ".status.phase", "Pending, Progressing, Ready, Degraded or Failed."),
        col("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
        col("Replicas", "integer", ".status.replicas", "Serving replicas that exist.", 1),
        col("Desired", "integer", ".status.desiredReplicas", "Replicas shardwise wants.", 1),
        col("GPU", "string", ".status.plan.gpuProduct", "GPU product of the plan.", 1),
        col("Weights", "string", ".status.plan.weights.format",
            "What vLLM loads: the checkpoint's format (fp8, mxfp4, awq) or the dtype asked.", 1),
        col("ITL-P95", "number", ".status.latency.itlP95Ms", "Inter-token latency, p95, ms.", 1),
        col("Tok/s", "number", ".status.latency.outputTokensPerSecond", "Output tokens per second.", 1),
        col("USD/1M", "number", ".status.cost.perMillionOutputTokensUSD",
            "GPU cost per million output tokens.", 1),
        col("Download", "string", ".status.modelCache.summary", "Model cache download progress.", 1),
        col("Rollout", "string", ".status.rollout.strategy", "Current or last rollout strategy.", 1),
        col("Rollout-State", "string", ".status.rollout.state", "Current or last rollout state.", 1),
        col("Roles", "string", ".status.roleSummary",
            "Disaggregated: each role's ready/desired replicas and layout.", 1),
    ]


def build_crd() -> dict[str, Any]:
    spec_schema = schema_of(api.InferenceDeploymentSpec)
    status_schema = schema_of(api.InferenceDeploymentStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{api.PLURAL}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": api.SHORT_NAMES,
                "categories": api.CATEGORIES,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "An LLM served by vLLM on GPUs, with tensor/pipeline parallelism "
                            "planned by shardwise from the cluster's GPU topology.",
                            "required": ["spec"],
                            # The name rule: every child name and label value derived from it valid.
                            "x-kubernetes-validations": names.admission_rules(),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": {**status_schema, "default": {}},
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": _printer_columns(),
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    header = "# Generated by `shardwise crds` from operator/shardwise/api/v1alpha1.py. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


def _namespaced_crd(kind: Any, spec: type, status: type, description: str) -> dict[str, Any]:
    """A namespaced kind of the gateway's (api/apikeys.py, api/providers.py): one version, a spec,
    a status subresource and the kind module's printer columns."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.PLURAL}.{kind.GROUP}"},
        "spec": {
            "group": kind.GROUP,
            "names": {"kind": kind.KIND, "listKind": f"{kind.KIND}List", "plural": kind.PLURAL,
                      "singular": kind.SINGULAR, "shortNames": kind.SHORT_NAMES,
                      "categories": api.CATEGORIES},
            "scope": "Namespaced",
            "versions": [{
                "name": kind.VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": description,
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": schema_of(spec),
                        "status": {**schema_of(status), "default": {}},
                    },
                }},
                "subresources": {"status": {}},
                "additionalPrinterColumns": kind.printer_columns(),
            }],
        },
    }


def build_apikey_crd() -> dict[str, Any]:
    """The APIKey CRD (api/apikeys.py): a gateway caller's quota and its usage in the status."""
    return _namespaced_crd(apikeys, apikeys.APIKeySpec, apikeys.APIKeyStatus,
                           "A caller of the shardwise gateway: the Secret holding its key, its "
                           "quota, and its usage and cost so far.")


def render_apikey_crd_yaml() -> str:
    header = "# Generated by `shardwise crds` from operator/shardwise/api/apikeys.py. Do not edit.\n"
    return header + yaml.safe_dump(build_apikey_crd(), sort_keys=False, width=120)


def build_provider_crd() -> dict[str, Any]:
    """The Provider CRD (api/providers.py): a hosted OpenAI-compatible API, its prices and health."""
    from shardwise.api import providers

    return _namespaced_crd(providers, providers.ProviderSpec, providers.ProviderStatus,
                           "A hosted OpenAI-compatible API behind the shardwise gateway: its URL, "
                           "the Secret holding its key, the models it offers and their prices.")


def render_provider_crd_yaml() -> str:
    header = "# Generated by `shardwise crds` from operator/shardwise/api/providers.py. Do not edit.\n"
    return header + yaml.safe_dump(build_provider_crd(), sort_keys=False, width=120)
