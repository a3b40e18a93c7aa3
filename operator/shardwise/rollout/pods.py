"""Which pods a rollout's new template made, and their plain state (ready, terminating).

Why a pod cannot start (image pull, crash loop, OOM) is read by controller.workload_health, over
the pods this module calls new.
"""

from __future__ import annotations

from typing import Any


def ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def terminating(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _holds(live: Any, desired: Any) -> bool:
    """Every field of `desired` is in `live` with the same value (the API server adds defaults)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and _holds(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(_holds, live, desired))
    return bool(live == desired)


# What a new version of a container changes; admission adds to the rest (the service-account
# token's volume mount, tolerations), so the rest is not compared.
VERSIONED_FIELDS = ("image", "command", "args", "env", "envFrom", "resources")


def of_template(pod: dict[str, Any], template: dict[str, Any]) -> bool:
    """Was the pod made from this pod template? Its containers' versioned fields and its
    annotations tell (the node, tolerations and mounts the API server adds do not)."""
    tspec, pspec = template.get("spec") or {}, pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        live = {c.get("name"): c for c in pspec.get(key) or []}
        for wanted in tspec.get(key) or []:
            have = live.get(wanted.get("name"))
            if have is None or not all(_holds(have.get(f), wanted[f]) for f in VERSIONED_FIELDS if f in wanted):
                return False
    wanted_annotations = (template.get("metadata") or {}).get("annotations") or {}
    have_annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return all(have_annotations.get(k) == v for k, v in wanted_annotations.items())
