"""The numeric bounds of the API's fields, read from the pydantic models that generate the CRD.

The planner reads offline YAML the API server never saw (`shardwise plan -f`), so it checks the
same bounds itself; reading them from here keeps the CRD and the planner on the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import annotated_types
from pydantic import BaseModel


@dataclass(frozen=True)
class Bounds:
    low: float = -math.inf
    low_inclusive: bool = True
    high: float = math.inf
    high_inclusive: bool = True

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value >= self.low if self.low_inclusive else value > self.low
        below = value <= self.high if self.high_inclusive else value < self.high
        return above and below

    def __str__(self) -> str:
        """Interval notation: "[0.05, 0.99]", "(0, 1]", "[1, 1024]"."""
        return (f"{'[' if self.low_inclusive else '('}{self.low:g}, "
                f"{self.high:g}{']' if self.high_inclusive else ')'}")


def of(model: type[BaseModel], field: str) -> Bounds:
    """The bounds pydantic (and so the CRD) puts on `model.field`."""
    bounds = Bounds()
    for item in model.model_fields[field].metadata:
        if isinstance(item, annotated_types.Ge):
            bounds = Bounds(float(item.ge), True, bounds.high, bounds.high_inclusive)
        elif isinstance(item, annotated_types.Gt):
            bounds = Bounds(float(item.gt), False, bounds.high, bounds.high_inclusive)
        elif isinstance(item, annotated_types.Le):
            bounds = Bounds(bounds.low, bounds.low_inclusive, float(item.le), True)
        elif isinstance(item, annotated_types.Lt):
            bounds = Bounds(bounds.low, bounds.low_inclusive, float(item.lt), False)
    return bounds
