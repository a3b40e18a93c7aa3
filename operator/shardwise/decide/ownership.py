"""Which existing objects shardwise may change: only those this InferenceDeployment controls.

Like controller-runtime's `SetControllerReference`/`AlreadyOwnedError`: an object that carries a
child's name but whose controller owner reference is not this InferenceDeployment (another
controller's, or none: a user's own object) is never changed, adopted or deleted. It is a
conflict a person resolves (rename one of them), reported with the object named.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shardwise.render.children import Owner


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in obj.get("metadata", {}).get("ownerReferences") or [] if r.get("controller")), None)


def is_controlled_by(obj: dict[str, Any], owner: Owner) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == owner.uid


def conflict_message(live: dict[str, Any], owner: Owner) -> str:
    kind, name = live.get("kind", "object"), live["metadata"]["name"]
    ref = controller_of(live)
    holder = f"is controlled by {ref.get('kind')} {ref.get('name')}" if ref else "has no controller (created by hand?)"
    return (f"{kind} {owner.namespace}/{name} already exists and {holder}; shardwise will not change, adopt or "
            f"delete it: rename the InferenceDeployment or remove that {kind}")


def conflicts(owner: Owner, pairs: Iterable[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[str]:
    """Messages for each (desired, live) child whose live object exists and is not ours."""
    return [conflict_message({**live, "kind": live.get("kind") or desired["kind"]}, owner)
            for desired, live in pairs if live is not None and not is_controlled_by(live, owner)]
