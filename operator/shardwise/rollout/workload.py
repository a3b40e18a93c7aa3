"""A rollout's identity and decision, on the workload object itself.

The revision is a hash of the rendered pod template(s): it changes exactly when the pods would
change, which is when a Deployment or LeaderWorkerSet rolls. The decision is stored in the
workload's own annotations, so it is applied in the same write as the new template (no window in
which one is there without the other), read back on every reconcile (the strategy cannot flip
mid-rollout) and survives an operator restart.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shardwise.rollout.strategy import Decision

REVISION_ANNOTATION = "shardwise.io/revision"
DECISION_ANNOTATION = "shardwise.io/rollout"
PREVIOUS_ANNOTATION = "shardwise.io/previous-revision"


def pod_templates(workload: dict[str, Any]) -> dict[str, Any]:
    """The part of a workload's spec that makes its pods: what a rollout replaces."""
    spec = workload.get("spec") or {}
    if workload.get("kind") == "LeaderWorkerSet":
        return {"leaderWorkerTemplate": spec.get("leaderWorkerTemplate") or {}}
    return {"template": spec.get("template") or {}}


def revision(rendered: dict[str, Any]) -> str:
    """Short stable hash of a rendered workload's pod templates."""
    text = json.dumps(pod_templates(rendered), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _annotations(workload: dict[str, Any] | None) -> dict[str, str]:
    return ((workload or {}).get("metadata") or {}).get("annotations") or {}


def live_revision(workload: dict[str, Any] | None) -> str | None:
    return _annotations(workload).get(REVISION_ANNOTATION)


def previous_revision(workload: dict[str, Any] | None) -> str | None:
    return _annotations(workload).get(PREVIOUS_ANNOTATION) or None


def decision(workload: dict[str, Any] | None) -> Decision | None:
    """The decision the workload carries, if any (workloads made before rollouts were tracked have none)."""
    raw = _annotations(workload).get(DECISION_ANNOTATION)
    if not raw:
        return None
    try:
        return Decision.from_dict(json.loads(raw))
    except ValueError:
        return None


def stamp(rendered: dict[str, Any], rev: str, chosen: Decision | None, previous: str | None) -> dict[str, Any]:
    """The rendered workload with the revision, the decision and its rolling-update knobs.

    `chosen` None (a workload adopted from before rollouts were tracked) keeps the rendered knobs.
    """
    out = copy.deepcopy(rendered)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[REVISION_ANNOTATION] = rev
    if previous:
        annotations[PREVIOUS_ANNOTATION] = previous
    if chosen is not None:
        annotations[DECISION_ANNOTATION] = json.dumps(chosen.to_dict(), sort_keys=True, separators=(",", ":"))
        knobs = chosen.rolling_update()
        spec = out["spec"]
        if out.get("kind") == "LeaderWorkerSet":
            spec["rolloutStrategy"] = {"type": "RollingUpdate", "rollingUpdateConfiguration": knobs}
        else:
            spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": knobs}
    return out


@dataclass(frozen=True)
class Carry:
    """What applying the rendered workload means for its rollout."""

    starts: bool  # the pods change: choose a strategy now
    decision: Decision | None  # otherwise, the decision to keep (None: none tracked)
    previous: str | None  # the revision being (or last) replaced
    rollback: bool = False  # the new revision is the one the live workload replaced


def carry(rev: str, live: dict[str, Any] | None, *, pods_unchanged: bool) -> Carry:
    """Start a rollout only when the live workload's pods differ from the rendered ones.

    `pods_unchanged`: the live pod templates already hold everything rendered (the shell's
    comparison), which adopts a workload made before revisions were stamped without rolling it.
    """
    if live is None:
        return Carry(False, None, None)  # created, not rolled
    live_rev = live_revision(live)
    if live_rev == rev:
        return Carry(False, decision(live), previous_revision(live))
    if live_rev is None and pods_unchanged:
        return Carry(False, None, None)
    return Carry(True, None, live_rev, rollback=rev == previous_revision(live))
