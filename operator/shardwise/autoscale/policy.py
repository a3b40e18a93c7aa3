"""The autoscaling policy: what the user asked for, validated once and held as plain data.

`policy_from_spec` turns `spec.autoscaling` (camelCase, as the API server stores it) into a
`Policy`, so the decision function never sees strings, defaults or bad input. Every error names
the offending key: the controller puts it on a condition, where the user reads it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

DEFAULT_TOLERANCE = 0.1
DEFAULT_SCALE_UP_STABILIZATION_S = 0.0
DEFAULT_SCALE_DOWN_STABILIZATION_S = 300.0
DEFAULT_EVALUATION_PERIOD_S = 30.0
DEFAULT_MAX_SCALE_UP_STEP = 4
DEFAULT_MAX_SCALE_DOWN_STEP = 1
DEFAULT_TARGET_UTILIZATION = 0.7
DEFAULT_MAX_WAITING_PER_REPLICA = 8.0
# Idle time before a deployment allowed to reach zero does so: KEDA's default cooldownPeriod, and
# the same as the default scale-down window, so one idle stretch is judged the same either way.
DEFAULT_SCALE_TO_ZERO_AFTER_S = 300.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_DURATION_WHOLE = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ms|s|m|h))+")
_MS_PER_UNIT = {"ms": 1.0, "s": 1_000.0, "m": 60_000.0, "h": 3_600_000.0}
_PERCENT = re.compile(r"(\d+(?:\.\d*)?)%")


class PolicyError(ValueError):
    """`spec.autoscaling` cannot be turned into a policy; the message names the key."""


@dataclasses.dataclass(frozen=True)
class SloTargets:
    """p95 latency targets in milliseconds; None means the user set no target for that signal."""

    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p95_ms: float | None = None


@dataclasses.dataclass(frozen=True)
class StepLimit:
    """How far one decision may move: a replica count, or a percentage of the current count."""

    amount: float
    percent: bool = False

    def allowed(self, current: int) -> int:
        """Replicas one decision may add or remove from `current`; always at least one."""
        if not self.percent:
            return int(self.amount)
        return max(1, math.ceil(current * self.amount / 100.0))

    def __str__(self) -> str:
        return f"{self.amount:g}%" if self.percent else f"{int(self.amount)}"


@dataclasses.dataclass(frozen=True)
class Policy:
    """Validated autoscaling settings; times in seconds, latencies in milliseconds."""

    min_replicas: int
    max_replicas: int
    slo: SloTargets
    tolerance: float = DEFAULT_TOLERANCE
    scale_up_stabilization_s: float = DEFAULT_SCALE_UP_STABILIZATION_S
    scale_down_stabilization_s: float = DEFAULT_SCALE_DOWN_STABILIZATION_S
    evaluation_period_s: float = DEFAULT_EVALUATION_PERIOD_S
    max_scale_up_step: StepLimit = StepLimit(DEFAULT_MAX_SCALE_UP_STEP)
    max_scale_down_step: StepLimit = StepLimit(DEFAULT_MAX_SCALE_DOWN_STEP)
    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    max_waiting_per_replica: float = DEFAULT_MAX_WAITING_PER_REPLICA
    allow_scale_to_zero: bool = False
    scale_to_zero_after_s: float = DEFAULT_SCALE_TO_ZERO_AFTER_S

    def __post_init__(self) -> None:
        # Checked here as well as in policy_from_spec so that a Policy built in code (tests, the
        # simulator) can never hold a combination the decision function was not written for.
        _check_policy(self)


def parse_duration_ms(value: object, *, key: str = "duration") -> float:
    """Milliseconds from a number (already ms) or a string such as "500ms", "1.5s", "1m30s"."""
    if isinstance(value, bool):
        raise PolicyError(f"{key}: expected a duration such as '500ms' or a number of ms, got {value!r}")
    if isinstance(value, (int, float)):
        ms = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not _DURATION_WHOLE.fullmatch(text):
            raise PolicyError(
                f"{key}: {value!r} is not a duration; use a number with a unit (ms, s, m, h) such as "
                "'500ms' or '1.5s', or a bare number of milliseconds"
            )
        ms = sum(float(number) * _MS_PER_UNIT[unit] for number, unit in _DURATION_PART.findall(text))
    else:
        raise PolicyError(f"{key}: expected a duration such as '500ms' or a number of ms, got {value!r}")
    if not math.isfinite(ms) or ms < 0:
        raise PolicyError(f"{key}: duration must be finite and not negative, got {value!r}")
    return ms


def policy_from_spec(autoscaling: Mapping[str, Any]) -> Policy:
    """Build a Policy from `spec.autoscaling`, applying defaults and naming any bad key."""
    if not isinstance(autoscaling, Mapping):
        raise PolicyError(f"autoscaling: expected an object, got {autoscaling!r}")
    # Unknown keys are ignored on purpose: the API server prunes fields the CRD schema does not
    # declare, so anything extra here is a field of the API this module has no use for.
    slo_spec = autoscaling.get("slo")
    if not isinstance(slo_spec, Mapping):
        raise PolicyError("autoscaling.slo: set at least one of ttftP95, itlP95, e2eP95")
    slo = SloTargets(
        ttft_p95_ms=_slo_ms(slo_spec, "ttftP95"),
        itl_p95_ms=_slo_ms(slo_spec, "itlP95"),
        e2e_p95_ms=_slo_ms(slo_spec, "e2eP95"),
    )
    if "maxReplicas" not in autoscaling:
        raise PolicyError("autoscaling.maxReplicas: required")
    policy_fields: dict[str, Any] = {
        "min_replicas": _integer(autoscaling, "minReplicas", 1),
        "max_replicas": _integer(autoscaling, "maxReplicas", 0),
        "slo": slo,
        "tolerance": _number(autoscaling, "tolerance", DEFAULT_TOLERANCE),
        "scale_up_stabilization_s": _number(
            autoscaling, "scaleUpStabilizationSeconds", DEFAULT_SCALE_UP_STABILIZATION_S
        ),
        "scale_down_stabilization_s": _number(
            autoscaling, "scaleDownStabilizationSeconds", DEFAULT_SCALE_DOWN_STABILIZATION_S
        ),
        "evaluation_period_s": _number(
            autoscaling, "evaluationPeriodSeconds", DEFAULT_EVALUATION_PERIOD_S
        ),
        "max_scale_up_step": _step(autoscaling, "maxScaleUpStep", DEFAULT_MAX_SCALE_UP_STEP),
        "max_scale_down_step": _step(autoscaling, "maxScaleDownStep", DEFAULT_MAX_SCALE_DOWN_STEP),
        "target_utilization": _number(autoscaling, "targetUtilization", DEFAULT_TARGET_UTILIZATION),
        "max_waiting_per_replica": _number(
            autoscaling, "maxWaitingPerReplica", DEFAULT_MAX_WAITING_PER_REPLICA
        ),
        "allow_scale_to_zero": _boolean(autoscaling, "allowScaleToZero", False),
        "scale_to_zero_after_s": _number(
            autoscaling, "scaleToZeroAfterSeconds", DEFAULT_SCALE_TO_ZERO_AFTER_S
        ),
    }
    return Policy(**policy_fields)


def _check_policy(policy: Policy) -> None:
    if policy.min_replicas < 0:
        raise PolicyError(f"autoscaling.minReplicas: must be >= 0, got {policy.min_replicas}")
    if policy.min_replicas == 0 and not policy.allow_scale_to_zero:
        raise PolicyError(
            "autoscaling.minReplicas: 0 needs allowScaleToZero: true (the first request after "
            "scaling to zero waits for a cold start)"
        )
    if policy.max_replicas < max(1, policy.min_replicas):
        raise PolicyError(
            f"autoscaling.maxReplicas: must be >= 1 and >= minReplicas ({policy.min_replicas}), "
            f"got {policy.max_replicas}"
        )
    targets = (policy.slo.ttft_p95_ms, policy.slo.itl_p95_ms, policy.slo.e2e_p95_ms)
    if all(target is None for target in targets):
        raise PolicyError("autoscaling.slo: set at least one of ttftP95, itlP95, e2eP95")
    if any(target is not None and not target > 0 for target in targets):
        raise PolicyError("autoscaling.slo: every target must be greater than zero")
    if not 0 <= policy.tolerance < 1:
        raise PolicyError(f"autoscaling.tolerance: must be in [0, 1), got {policy.tolerance}")
    for key, seconds in (("scaleUpStabilizationSeconds", policy.scale_up_stabilization_s),
                         ("scaleDownStabilizationSeconds", policy.scale_down_stabilization_s)):
        if seconds < 0:
            raise PolicyError(f"autoscaling.{key}: must be >= 0, got {seconds:g}")
    if policy.scale_to_zero_after_s < 0:
        raise PolicyError(
            f"autoscaling.scaleToZeroAfterSeconds: must be >= 0, got {policy.scale_to_zero_after_s:g}"
        )
    if not policy.evaluation_period_s > 0:
        raise PolicyError(
            f"autoscaling.evaluationPeriodSeconds: must be > 0, got {policy.evaluation_period_s}"
        )
    # A scale-down must land below the tolerance band, or the next period scales back up.
    if not 0 < policy.target_utilization <= 1 - policy.tolerance:
        raise PolicyError(
            f"autoscaling.targetUtilization: must be in (0, 1 - tolerance] = "
            f"(0, {1 - policy.tolerance:g}], got {policy.target_utilization}"
        )
    if not policy.max_waiting_per_replica > 0:
        raise PolicyError(
            f"autoscaling.maxWaitingPerReplica: must be > 0, got {policy.max_waiting_per_replica}"
        )
    for key, step in (("maxScaleUpStep", policy.max_scale_up_step),
                      ("maxScaleDownStep", policy.max_scale_down_step)):
        if not step.amount > 0 or (not step.percent and step.amount != int(step.amount)):
            raise PolicyError(f"autoscaling.{key}: must be a positive integer or percentage")


def _slo_ms(slo: Mapping[str, Any], key: str) -> float | None:
    value = slo.get(key)
    return None if value is None else parse_duration_ms(value, key=f"autoscaling.slo.{key}")


def _integer(spec: Mapping[str, Any], key: str, default: int) -> int:
    value = spec.get(key, default)
    # bool is an int in Python; `minReplicas: true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"autoscaling.{key}: expected an integer, got {value!r}")
    return value


def _number(spec: Mapping[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(f"autoscaling.{key}: expected a number, got {value!r}")
    return float(value)


def _boolean(spec: Mapping[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise PolicyError(f"autoscaling.{key}: expected true or false, got {value!r}")
    return value


def _step(spec: Mapping[str, Any], key: str, default: int) -> StepLimit:
    value = spec.get(key, default)
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value.strip())
        if match is None:
            raise PolicyError(f"autoscaling.{key}: expected a replica count or a percentage "
                              f"such as '100%', got {value!r}")
        return StepLimit(float(match.group(1)), percent=True)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"autoscaling.{key}: expected a replica count or a percentage "
                          f"such as '100%', got {value!r}")
    return StepLimit(value)
