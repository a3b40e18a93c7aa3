"""metav1.Condition bookkeeping: lastTransitionTime moves only when a condition's status flips.

GitOps tools and `kubectl wait` read conditions; rewriting the time on every reconcile would look
like churn to them (lws's older setCondition does that; its newer code does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None means Unknown
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return {True: "True", False: "False", None: "Unknown"}[self.status]


def merge(existing: list[dict[str, Any]], updates: list[Condition], *, generation: int | None,
          now: str) -> list[dict[str, Any]]:
    """Existing conditions with `updates` applied; untouched types are kept as they were."""
    by_type = {c["type"]: dict(c) for c in existing}
    for update in updates:
        old = by_type.get(update.type)
        changed = old is None or old.get("status") != update.status_text
        new = {
            "type": update.type,
            "status": update.status_text,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),
        }
        if generation is not None:
            new["observedGeneration"] = generation
        by_type[update.type] = new
    return sorted(by_type.values(), key=lambda c: c["type"])


def find(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
