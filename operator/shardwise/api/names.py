"""Every name and label value shardwise derives from an InferenceDeployment's name, and the rule
on that name which keeps all of them valid.

One place, so that the admission rule (CEL on `metadata.name`, generated into the CRD from the
constants below) and what render writes cannot drift apart: if a name passes `name_problem`, every
child below is a valid Kubernetes name and every label value is a valid label value.

What a resource NAME becomes (the longest first):
- multi-node replicas: a LeaderWorkerSet `NAME-lws`. The LWS controller makes one worker
  StatefulSet per group, named after the group's leader pod: `NAME-lws-<group index>`; the
  StatefulSet controller labels each of its pods `controller-revision-hash: <StatefulSet>-<hash>`,
  the hash up to 10 characters. A label value holds at most 63 characters, so with group indexes
  up to MAX_REPLICAS - 1 the resource name may have at most 63 - 11 - 4 - 4 = 44 characters.
- a Service `NAME` (a DNS-1035 label: lowercase letters, digits and '-', starting with a letter,
  at most 63 characters): no dots and no leading digit, though other objects would allow them;
- a Deployment `NAME`, label values `NAME` (`shardwise.io/inference-deployment`,
  `app.kubernetes.io/instance`).

It sits in the API package, below render, because the CRD generator (api.crd) needs it and may
not import render.
"""

from __future__ import annotations

import re
from typing import Any

# spec.replicas and spec.autoscaling.maxReplicas are bounded by this (v1alpha1 uses it).
MAX_REPLICAS = 1000

LEADERWORKERSET_SUFFIX = "-lws"
_LABEL_VALUE_MAX = 63  # Kubernetes label values and DNS-1035 labels
_REVISION_HASH_SUFFIX = 1 + 10  # "-" + ControllerRevision hash (a uint32, safe-encoded)
_GROUP_INDEX_SUFFIX = 1 + len(str(MAX_REPLICAS - 1))  # "-" + the LWS group index

MAX_NAME_LENGTH = (
    _LABEL_VALUE_MAX - _REVISION_HASH_SUFFIX - _GROUP_INDEX_SUFFIX - len(LEADERWORKERSET_SUFFIX)
)
# DNS-1035 label, as the Service name needs it (Kubernetes' own regular expression).
DNS1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DNS1035 = re.compile(DNS1035_PATTERN)
# A label value: empty or alphanumerics at both ends, '-', '_' and '.' inside, at most 63.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

LENGTH_MESSAGE = (
    f"metadata.name must be at most {MAX_NAME_LENGTH} characters: shardwise names a LeaderWorkerSet "
    f"NAME{LEADERWORKERSET_SUFFIX} after it for multi-node replicas, and its worker StatefulSets "
    f"NAME{LEADERWORKERSET_SUFFIX}-<replica> must fit a 63-character label with their revision hash"
)
SHAPE_MESSAGE = (
    "metadata.name must start with a lowercase letter and contain only lowercase letters, digits "
    "and '-' (no dots, no leading digit, no trailing '-'): it also names the model's Service, "
    "which Kubernetes requires to be a DNS-1035 label"
)


def deployment_name(name: str) -> str:
    return name


def service_name(name: str) -> str:
    return name


def inference_pool_name(name: str) -> str:
    """The InferencePool (spec.routing): named like the Service, so a person finds one from the other."""
    return name


def http_route_name(name: str) -> str:
    return name


def bbr_configmap_name(name: str) -> str:
    """The body-based router's model entry (render/routing.py); ConfigMap names allow 253."""
    return f"{name}-bbr-models"


def leaderworkerset_name(name: str) -> str:
    """Not the resource's own name, which the client Service keeps: LWS makes a headless Service
    named after the LeaderWorkerSet for its pods' DNS, and two Services cannot share a name."""
    return f"{name}{LEADERWORKERSET_SUFFIX}"


def worker_statefulset_name(name: str, group: int) -> str:
    """The StatefulSet the LWS controller makes for group `group`'s workers (its leader pod's name)."""
    return f"{leaderworkerset_name(name)}-{group}"


def instance_label_value(name: str) -> str:
    """The value of the instance labels (`shardwise.io/inference-deployment`, app.kubernetes.io/instance)."""
    return name


def longest_derived_label_value(name: str) -> str:
    """The longest label value any child of `name` gets, shardwise's or a controller's under it."""
    return f"{worker_statefulset_name(name, MAX_REPLICAS - 1)}-{'x' * (_REVISION_HASH_SUFFIX - 1)}"


def name_problem(name: str) -> str | None:
    """Why `name` cannot be an InferenceDeployment's name, or None (the CEL rules, in Python)."""
    if len(name) > MAX_NAME_LENGTH:
        return LENGTH_MESSAGE
    if not _DNS1035.match(name):
        return SHAPE_MESSAGE
    return None


def is_dns1035_label(value: str) -> bool:
    return len(value) <= _LABEL_VALUE_MAX and bool(_DNS1035.match(value))


def is_label_value(value: str) -> bool:
    return len(value) <= _LABEL_VALUE_MAX and bool(_LABEL_VALUE.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    """Deployment, LeaderWorkerSet and StatefulSet names."""
    part = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    return len(value) <= 253 and re.fullmatch(rf"{part}(\.{part})*", value) is not None


def admission_rules() -> list[dict[str, Any]]:
    """CEL rules for the CRD's root schema: the API server rejects a name before shardwise sees it.

    Checked on create only (`optionalOldSelf`: an update has an old object): a name never changes,
    and an object admitted before this rule existed (a 50-character name serving on one node)
    must still take its status writes and spec edits after the CRD is upgraded.
    """
    def on_create(rule: str, message: str) -> dict[str, Any]:
        return {"rule": f"oldSelf.hasValue() || {rule}", "message": message, "optionalOldSelf": True}

    return [
        on_create(f"self.metadata.name.size() <= {MAX_NAME_LENGTH}", LENGTH_MESSAGE),
        on_create(f"self.metadata.name.matches('{DNS1035_PATTERN}')", SHAPE_MESSAGE),
    ]
