from shardwise import conditions
from shardwise.conditions import Condition


def test_transition_time_changes_only_when_status_flips() -> None:
    first = conditions.merge([], [Condition("Ready", False, "Progressing", "0/1 ready")], generation=1, now="t1")
    same = conditions.merge(first, [Condition("Ready", False, "Progressing", "0/2 ready")], generation=2, now="t2")
    assert same[0]["lastTransitionTime"] == "t1"
    assert same[0]["message"] == "0/2 ready" and same[0]["observedGeneration"] == 2
    flipped = conditions.merge(same, [Condition("Ready", True, "Ready", "")], generation=2, now="t3")
    assert flipped[0]["lastTransitionTime"] == "t3" and flipped[0]["status"] == "True"


def test_untouched_conditions_are_kept_and_order_is_stable() -> None:
    base = conditions.merge([], [Condition("SLOMet", True, "WithinSLO")], generation=1, now="t1")
    out = conditions.merge(base, [Condition("Ready", None, "Unknown")], generation=1, now="t2")
    assert [c["type"] for c in out] == ["Ready", "SLOMet"]
    assert out[0]["status"] == "Unknown"
    assert conditions.find(out, "SLOMet")["lastTransitionTime"] == "t1"
