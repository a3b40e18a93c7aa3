"""`kubectl scale` on an autoscaled resource is reported as ignored, with why, and announced once."""

from shardwise.decide import transitions
from shardwise.decide import progress
from shardwise.render.children import Owner

from tests.unit.core.test_progress import PLAN, deployment, spec

AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "slo": {"ttftP95": "1s"}}


def status_of(spec_, before=None):
    return progress.build_status(spec_, PLAN, deployment(1, 1), [], before or {}, owner=Owner("m", "ns", "u"),
                                 generation=2, now="t")


def ignored(status):
    return next(c for c in status["conditions"] if c["type"] == "ReplicasIgnored")


def test_replicas_set_beside_autoscaling_is_ignored_with_the_reason() -> None:
    status = status_of(spec(replicas=7, autoscaling=AUTOSCALING))
    cond = ignored(status)
    assert (cond["status"], cond["reason"]) == ("True", "AutoscalingOwnsReplicas")
    assert "spec.replicas=7" in cond["message"] and "between 1 and 4" in cond["message"]
    assert status["desiredReplicas"] == 1  # the autoscaler's count, not 7


def test_no_condition_without_autoscaling_or_without_replicas() -> None:
    assert ignored(status_of(spec(replicas=3)))["status"] == "False"
    assert ignored(status_of(spec(autoscaling=AUTOSCALING)))["status"] == "False"


def test_one_warning_per_transition() -> None:
    before = status_of(spec(autoscaling=AUTOSCALING))
    after = status_of(spec(replicas=7, autoscaling=AUTOSCALING), before)
    assert [(t, r) for t, r, _ in transitions.transitions(before, after)] == [("Warning", "AutoscalingOwnsReplicas")]
    assert transitions.transitions(after, status_of(spec(replicas=7, autoscaling=AUTOSCALING), after)) == []
