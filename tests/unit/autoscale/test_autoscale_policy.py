"""policy_from_spec and parse_duration_ms: defaults, accepted forms, and errors that name the key."""

from __future__ import annotations

import math

import pytest

from shardwise.autoscale import policy as policy_mod
from shardwise.autoscale.policy import PolicyError, StepLimit, parse_duration_ms, policy_from_spec

MINIMAL = {"maxReplicas": 4, "slo": {"ttftP95": "500ms"}}


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("500ms", 500.0),
        ("1.5s", 1_500.0),
        (" 2s ", 2_000.0),
        (".5s", 500.0),
        ("1m30s", 90_000.0),
        ("1h", 3_600_000.0),
        (250, 250.0),
        (2.5, 2.5),
        (0, 0.0),
    ],
)
def test_parse_duration_ms_accepts(value: object, expected_ms: float) -> None:
    assert parse_duration_ms(value) == pytest.approx(expected_ms)


@pytest.mark.parametrize(
    "value", ["500", "fast", "", "ms", "5 ms", "-5ms", "1d", -1, math.nan, math.inf, True, None, [5]]
)
def test_parse_duration_ms_rejects_with_the_key(value: object) -> None:
    with pytest.raises(PolicyError, match="autoscaling.slo.ttftP95"):
        parse_duration_ms(value, key="autoscaling.slo.ttftP95")


def test_defaults_from_minimal_spec() -> None:
    policy = policy_from_spec(MINIMAL)
    assert policy.min_replicas == 1
    assert policy.max_replicas == 4
    assert policy.slo == policy_mod.SloTargets(ttft_p95_ms=500.0)
    assert policy.tolerance == 0.1
    assert policy.scale_up_stabilization_s == 0
    assert policy.scale_down_stabilization_s == 300
    assert policy.evaluation_period_s == 30
    assert policy.max_scale_up_step == StepLimit(4)
    assert policy.max_scale_down_step == StepLimit(1)
    assert policy.target_utilization == 0.7
    assert policy.max_waiting_per_replica == 8
    assert policy.allow_scale_to_zero is False


def test_full_spec() -> None:
    policy = policy_from_spec({
        "minReplicas": 0, "maxReplicas": 8, "allowScaleToZero": True,
        "slo": {"ttftP95": "1.5s", "itlP95": 50, "e2eP95": "20s"},
        "tolerance": 0.2, "scaleUpStabilizationSeconds": 60, "scaleDownStabilizationSeconds": 600,
        "evaluationPeriodSeconds": 15, "maxScaleUpStep": "100%", "maxScaleDownStep": 2,
        "targetUtilization": 0.6, "maxWaitingPerReplica": 4,
        "someFieldOfTheApi": "ignored",
    })
    assert policy.slo == policy_mod.SloTargets(1_500.0, 50.0, 20_000.0)
    assert (policy.min_replicas, policy.max_replicas, policy.allow_scale_to_zero) == (0, 8, True)
    assert policy.max_scale_up_step == StepLimit(100.0, percent=True)
    assert policy.max_scale_down_step == StepLimit(2)
    assert (policy.tolerance, policy.target_utilization, policy.max_waiting_per_replica) == (
        0.2, 0.6, 4.0)
    assert (policy.scale_up_stabilization_s, policy.scale_down_stabilization_s,
            policy.evaluation_period_s) == (60.0, 600.0, 15.0)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"maxReplicas": 4}, "autoscaling.slo"),
        ({"maxReplicas": 4, "slo": {}}, "autoscaling.slo"),
        ({"maxReplicas": 4, "slo": {"ttftP95": "0ms"}}, "autoscaling.slo"),
        ({"maxReplicas": 4, "slo": {"itlP95": "quick"}}, "autoscaling.slo.itlP95"),
        ({"slo": {"ttftP95": "500ms"}}, "autoscaling.maxReplicas"),
        ({**MINIMAL, "minReplicas": 5}, "autoscaling.maxReplicas"),
        ({**MINIMAL, "maxReplicas": 0, "minReplicas": 0, "allowScaleToZero": True},
         "autoscaling.maxReplicas"),
        ({**MINIMAL, "minReplicas": 0}, "allowScaleToZero"),
        ({**MINIMAL, "minReplicas": -1}, "autoscaling.minReplicas"),
        ({**MINIMAL, "minReplicas": True}, "autoscaling.minReplicas"),
        ({**MINIMAL, "minReplicas": 1.5}, "autoscaling.minReplicas"),
        ({**MINIMAL, "allowScaleToZero": "yes"}, "autoscaling.allowScaleToZero"),
        ({**MINIMAL, "tolerance": -0.1}, "autoscaling.tolerance"),
        ({**MINIMAL, "tolerance": 1}, "autoscaling.tolerance"),
        ({**MINIMAL, "tolerance": "10%"}, "autoscaling.tolerance"),
        ({**MINIMAL, "targetUtilization": 0.95}, "autoscaling.targetUtilization"),
        ({**MINIMAL, "targetUtilization": 0}, "autoscaling.targetUtilization"),
        ({**MINIMAL, "evaluationPeriodSeconds": 0}, "autoscaling.evaluationPeriodSeconds"),
        ({**MINIMAL, "scaleDownStabilizationSeconds": -1},
         "autoscaling.scaleDownStabilizationSeconds"),
        ({**MINIMAL, "scaleUpStabilizationSeconds": -1}, "autoscaling.scaleUpStabilizationSeconds"),
        ({**MINIMAL, "maxScaleUpStep": 0}, "autoscaling.maxScaleUpStep"),
        ({**MINIMAL, "maxScaleUpStep": "lots"}, "autoscaling.maxScaleUpStep"),
        ({**MINIMAL, "maxScaleDownStep": "0%"}, "autoscaling.maxScaleDownStep"),
        ({**MINIMAL, "maxWaitingPerReplica": 0}, "autoscaling.maxWaitingPerReplica"),
    ],
)
def test_bad_spec_names_the_key(spec: dict[str, object], key: str) -> None:
    with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
        policy_from_spec(spec)


def test_spec_must_be_an_object() -> None:
    with pytest.raises(PolicyError, match="expected an object"):
        policy_from_spec(["maxReplicas", 4])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("step", "current", "allowed"),
    [(StepLimit(4), 10, 4), (StepLimit(100.0, percent=True), 3, 3),
     (StepLimit(50.0, percent=True), 3, 2), (StepLimit(10.0, percent=True), 1, 1),
     (StepLimit(100.0, percent=True), 0, 1)],
)
def test_step_limit_allows(step: StepLimit, current: int, allowed: int) -> None:
    assert step.allowed(current) == allowed
