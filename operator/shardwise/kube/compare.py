"""Does the live object already hold what we would apply? Then applying would write nothing new.

The API server adds defaults and metadata to every object, so equality never holds; but every
field we set must be there with our value. Lists are compared item by item in order, which is how
server-side apply keeps the lists we own (containers, ports, args).
"""

from __future__ import annotations

from typing import Any


def contains(live: Any, desired: Any) -> bool:
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and contains(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(contains, live, desired))
    if isinstance(desired, bool) or isinstance(live, bool):
        return live is desired
    if isinstance(desired, (int, float)) and isinstance(live, (int, float)):
        return float(live) == float(desired)
    return live == desired


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `current` into `desired` for desired's keys only.

    Keys of `current` that `desired` does not mention are left alone (another loop owns them);
    inside a mentioned object, keys that disappeared are set to null so they are removed.
    """
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        old = current.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            nested = merge_patch(old, value)
            nested.update({k: None for k in old if k not in value})
            if nested:
                patch[key] = nested
        elif old != value:
            patch[key] = value
    return patch
