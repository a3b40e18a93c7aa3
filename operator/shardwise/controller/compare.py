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
