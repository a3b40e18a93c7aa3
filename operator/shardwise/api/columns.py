"""A CRD's printer column (`kubectl get`), the one shape every kind of shardwise's uses."""

from __future__ import annotations

from typing import Any


def column(name: str, type_: str, path: str, *, description: str | None = None, priority: int = 0) -> dict[str, Any]:
    """Priority 0 columns show by default, priority 1 with `-o wide`."""
    c: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path}
    if description is not None:
        c["description"] = description
    if priority:
        c["priority"] = priority
    return c
