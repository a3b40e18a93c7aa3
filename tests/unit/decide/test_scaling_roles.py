"""Per-role autoscaling of a disaggregated deployment, pure parts: the API's rules, each role's
policy carrying only its own SLO, the replicas a role runs, the pair rule for zero, the status a
role's decision writes, and decide() rendering each role at its decided count."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from shardwise import autoscale
from shardwise.api import v1alpha1 as api
from shardwise.autoscale import Decision, Observation
from shardwise.decide import reconcile, scaling_status
from shardwise.render.labels import WAKE_ANNOTATION
from tests.unit.decide.test_decide import infd, snapshot
from tests.unit.decide.test_decide_disaggregation import DECODE, PREFILL, unseen

ROLE_SCALING = {"minReplicas": 1, "maxReplicas": 4, "evaluationPeriodSeconds": 10}


def pair(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"mode": "Disaggregated",
            "prefill": {"slo": {"ttftP95": "2s"}, **({"autoscaling": prefill} if prefill else {})},
            "decode": {"slo": {"itlP95": "30ms"}, **({"autoscaling": decode} if decode else {})}}


def spec_of(disaggregation: dict[str, Any], **extra: Any) -> api.InferenceDeploymentSpec:
    body = infd(disaggregation=disaggregation, **extra)["spec"]
    body.pop("replicas")
    return api.InferenceDeploymentSpec.model_validate(body)


def test_a_role_scales_only_with_the_slo_it_answers_for() -> None:
    with pytest.raises(pydantic.ValidationError, match="prefill.slo.ttftP95"):
        spec_of({"mode": "Disaggregated", "prefill": {"autoscaling": ROLE_SCALING}})
    with pytest.raises(pydantic.ValidationError, match="decode.slo.itlP95"):
        spec_of({"mode": "Disaggregated", "decode": {"slo": {}, "autoscaling": ROLE_SCALING}})
    spec = spec_of(pair(decode=ROLE_SCALING))
    assert scaling_status.scaled_roles(spec) == ("decode",)


def test_scale_to_zero_is_set_on_both_roles_or_neither() -> None:
    zero = {**ROLE_SCALING, "minReplicas": 0, "allowScaleToZero": True}
    with pytest.raises(pydantic.ValidationError, match="applies to the pair"):
        spec_of(pair(prefill=ROLE_SCALING, decode=zero))
    with pytest.raises(pydantic.ValidationError, match="applies to the pair"):
        spec_of(pair(decode=zero))
    assert scaling_status.scaled_roles(spec_of(pair(prefill=zero, decode=zero))) == ("prefill", "decode")


def test_spec_autoscaling_on_a_pair_is_refused_naming_the_per_role_keys() -> None:
    with pytest.raises(pydantic.ValidationError, match="disaggregation.decode.autoscaling"):
        spec_of(pair(), autoscaling={"maxReplicas": 2, "slo": {"itlP95": "30ms"}})


def test_each_role_policy_holds_its_own_slo_only() -> None:
    spec = spec_of(pair(prefill=ROLE_SCALING, decode={**ROLE_SCALING, "maxReplicas": 6}))
    prefill, decode = (scaling_status.role_policy(spec, r) for r in ("prefill", "decode"))
    assert (prefill.slo.ttft_p95_ms, prefill.slo.itl_p95_ms) == (2000.0, None)
    assert (decode.slo.ttft_p95_ms, decode.slo.itl_p95_ms) == (None, 30.0)
    assert (prefill.max_replicas, decode.max_replicas, decode.evaluation_period_s) == (4, 6, 10.0)


def observed(**figures: Any) -> Observation:
    base = dict(current_replicas=2, replicas_ready=2, replicas_starting=0, requests_per_second=5.0,
                running=4.0, waiting=0.0)
    return Observation(**{**base, **figures})


def test_the_same_decide_scales_decode_on_itl_and_leaves_prefill_on_its_ttft() -> None:
    """One engine fleet's figures: ITL over decode's SLO, TTFT inside prefill's. Judged per role,
    decode scales up and prefill holds; the figure that is not a role's SLO does not move it."""
    spec = spec_of(pair(prefill=ROLE_SCALING, decode=ROLE_SCALING))
    history = autoscale.History()
    decode = autoscale.decide(scaling_status.role_policy(spec, "decode"),
                              observed(itl_p95_ms=60.0, ttft_p95_ms=1900.0), history, 1000.0)
    prefill = autoscale.decide(scaling_status.role_policy(spec, "prefill"),
                               observed(itl_p95_ms=60.0, ttft_p95_ms=1900.0), history, 1000.0)
    assert decode.desired_replicas == 4 and "ITL" in decode.reason, decode.reason
    assert prefill.desired_replicas == 2, prefill.reason
    # And the other way round: a prefill whose TTFT breaks scales alone.
    prefill = autoscale.decide(scaling_status.role_policy(spec, "prefill"),
                               observed(ttft_p95_ms=3000.0, itl_p95_ms=25.0), history, 1000.0)
    decode = autoscale.decide(scaling_status.role_policy(spec, "decode"),
                              observed(ttft_p95_ms=3000.0, itl_p95_ms=25.0), history, 1000.0)
    assert prefill.desired_replicas == 3 and "TTFT" in prefill.reason, prefill.reason
    assert decode.desired_replicas == 2, decode.reason


def test_a_role_runs_its_decision_within_its_bounds_and_a_fixed_role_its_replicas() -> None:
    spec = spec_of(pair(decode=ROLE_SCALING))
    status = {"autoscaling": {"roles": {"decode": {"desiredReplicas": 9}}}}
    assert scaling_status.role_replicas(spec, status, "decode") == 4  # maxReplicas
    assert scaling_status.role_replicas(spec, {}, "decode") == 1  # no decision yet: minReplicas
    assert scaling_status.role_replicas(spec, status, "prefill") == 1  # the spec's replicas
    applied = scaling_status.with_role_replicas(spec, {"autoscaling": {"roles": {"decode": {"desiredReplicas": 3}}}})
    assert applied.disaggregation is not None and applied.disaggregation.decode.replicas == 3
    assert spec.disaggregation is not None and spec.disaggregation.decode.replicas == 1  # not mutated


def decision(desired: int, current: int) -> Decision:
    return Decision(desired_replicas=desired, current_replicas=current, recommendation=desired, cause="test")


def test_the_pair_goes_to_zero_only_together_and_wakes_together() -> None:
    both_idle = scaling_status.paired({"prefill": decision(0, 1), "decode": decision(0, 1)},
                                      {"prefill": 1, "decode": 1})
    assert {r: d.desired_replicas for r, d in both_idle.items()} == {"prefill": 0, "decode": 0}
    decode_idle = scaling_status.paired({"prefill": decision(1, 1), "decode": decision(0, 1)},
                                        {"prefill": 1, "decode": 1})
    assert {r: d.desired_replicas for r, d in decode_idle.items()} == {"prefill": 1, "decode": 1}
    assert decode_idle["decode"].direction is autoscale.Direction.HOLD
    assert "scale to zero applies to the pair" in decode_idle["decode"].reason
    woken = scaling_status.paired({"prefill": decision(0, 0), "decode": decision(1, 0)},
                                  {"prefill": 0, "decode": 0})
    assert {r: d.desired_replicas for r, d in woken.items()} == {"prefill": 1, "decode": 1}
    assert woken["prefill"].direction is autoscale.Direction.UP


def test_a_role_decision_is_written_under_its_role_and_spends_the_wake_request() -> None:
    outcome = scaling_status.apply_role_decisions(
        {}, {"prefill": decision(1, 1), "decode": decision(3, 1)}, capacity={"prefill": 8, "decode": 8},
        stamp="2026-01-01T00:00:10Z")
    roles = outcome.update["autoscaling"]["roles"]
    assert (roles["prefill"]["desiredReplicas"], roles["decode"]["desiredReplicas"]) == (1, 3)
    assert outcome.changed and [e[1] for e in outcome.events] == ["ScaledUp"]
    assert outcome.events[0][2].startswith("decode: ")
    assert "desiredReplicas" not in outcome.update  # reconcile sums the roles
    woke = {WAKE_ANNOTATION: "2026-01-01T00:00:05Z"}
    assert scaling_status.held_at_gateway(woke, {}) == 1.0
    assert scaling_status.held_at_gateway(woke, outcome.update) == 0.0
    again = scaling_status.apply_role_decisions(outcome.update, {"prefill": decision(1, 1), "decode": decision(3, 3)},
                                                capacity={"prefill": 8, "decode": 8}, stamp="2026-01-01T00:00:40Z")
    assert again.update == {} and not again.changed  # a steady pair writes nothing


def test_decide_renders_each_autoscaled_role_at_its_decided_count() -> None:
    resource = infd(disaggregation=pair(prefill=ROLE_SCALING, decode=ROLE_SCALING))
    resource["spec"].pop("replicas")
    resource["status"] = {"autoscaling": {"roles": {"prefill": {"desiredReplicas": 1},
                                                    "decode": {"desiredReplicas": 3}}}}
    decision_ = reconcile.decide(snapshot(resource, children=unseen()))
    applied = {reconcile.key_of(a.obj): a.obj for a in decision_.apply}
    assert (applied[PREFILL]["spec"]["replicas"], applied[DECODE]["spec"]["replicas"]) == (1, 3)
    status = decision_.status or {}
    assert status["roles"]["decode"]["desiredReplicas"] == 3 and status["desiredReplicas"] == 4
