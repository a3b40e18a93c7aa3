"""Labels and annotations shardwise puts on what it creates."""

from __future__ import annotations

from shardwise.api import names

INSTANCE_LABEL = "shardwise.io/inference-deployment"
FIELD_MANAGER = "shardwise"

# Facts the simulated engine reads in GPU-less clusters; harmless on real ones.
MODEL_PARAMETERS_ANNOTATION = "shardwise.io/model-parameters"
MAX_CONCURRENCY_ANNOTATION = "shardwise.io/max-concurrency"
REPLAN_ANNOTATION = "shardwise.io/replan"
# Written by the gateway (RFC 3339, UTC) while it holds a request for a model with no ready
# replica: the demand that wakes a deployment scaled to zero, where no engine reports traffic.
WAKE_ANNOTATION = "shardwise.io/wake-requested"


def selector_labels(name: str) -> dict[str, str]:
    """The labels that identify one InferenceDeployment's serving pods (stable for its lifetime)."""
    return {INSTANCE_LABEL: names.instance_label_value(name)}


def common_labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": names.instance_label_value(name),
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/managed-by": "shardwise",
    }


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())
