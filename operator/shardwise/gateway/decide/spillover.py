"""Spill-over while a self-hosted model wakes (pure): which request goes to the provider, within
the deployment's `maxShare`.

The share is counted over one waking spell of a model (from its first request with no replica
Ready to the first Ready replica): a request spills when the spilled count, itself included, stays
within ceil(maxShare x the requests seen, itself included), so the first request of a spell always
spills (the point: an answer at once) and over a spell the share converges on maxShare. A spell
that ends starts the count again.
"""

from __future__ import annotations

import dataclasses
import math

WAKING = "Waking"


@dataclasses.dataclass(frozen=True)
class Spillover:
    provider: str  # the Provider's namespace/name
    model: str  # the Provider's model name (a catalogue name)
    max_share: float = 1.0


def of(spec: object, namespace: str) -> Spillover | None:
    """The spill-over of an InferenceDeployment's spec.spillover, None without a usable one."""
    if not isinstance(spec, dict):
        return None
    provider, model, when = spec.get("provider"), spec.get("model"), spec.get("when") or [WAKING]
    try:
        share = float(spec.get("maxShare", 1.0))
    except (TypeError, ValueError):
        return None
    if not (isinstance(provider, str) and provider and isinstance(model, str) and model) or WAKING not in when \
            or not 0 < share <= 1:
        return None
    return Spillover(f"{namespace}/{provider}", model, share)


@dataclasses.dataclass
class Spell:
    seen: int = 0
    spilled: int = 0


def admit(spell: Spell, max_share: float) -> bool:
    """Count one request of the spell; True: it spills."""
    spell.seen += 1
    if spell.spilled + 1 <= math.ceil(max_share * spell.seen - 1e-9):
        spell.spilled += 1
        return True
    return False
