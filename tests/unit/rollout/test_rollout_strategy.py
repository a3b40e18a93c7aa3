"""The strategy a rollout starts with: surge with room, else replace in place or wait, as chosen."""

from __future__ import annotations

import pytest
from shardwise.api.v1alpha1 import WhenNoRoom
from shardwise.rollout import strategy
from shardwise.rollout.room import Room


def room(spare: int, free: int = 0, per_node: int = 4, nodes: int = 1) -> Room:
    return Room(spare_replicas=spare, free_gpus=free, gpus_per_node=per_node, nodes_per_replica=nodes,
                product="NVIDIA-L40S", shortfall=f"needs {per_node} free GPUs on one node; most free now is 0 on l-0")


@pytest.mark.parametrize(("policy", "replicas", "spare", "expected", "knobs"), [
    (WhenNoRoom.ReplaceInPlace, 3, 1, strategy.SURGE, {"maxSurge": 1, "maxUnavailable": 0}),
    (WhenNoRoom.Wait, 1, 1, strategy.SURGE, {"maxSurge": 1, "maxUnavailable": 0}),
    (WhenNoRoom.ReplaceInPlace, 3, 0, strategy.REPLACE_IN_PLACE, {"maxSurge": 0, "maxUnavailable": 1}),
    # Several replicas are replaced one at a time whatever the policy: the others keep serving.
    (WhenNoRoom.Wait, 3, 0, strategy.REPLACE_IN_PLACE, {"maxSurge": 0, "maxUnavailable": 1}),
    (WhenNoRoom.ReplaceInPlace, 1, 0, strategy.REPLACE_IN_PLACE, {"maxSurge": 0, "maxUnavailable": 1}),
    (WhenNoRoom.Wait, 1, 0, strategy.WAIT_FOR_ROOM, {"maxSurge": 1, "maxUnavailable": 0}),
    (WhenNoRoom.Wait, 0, 0, strategy.SURGE, {"maxSurge": 1, "maxUnavailable": 0}),
])
def test_strategy_table(policy: WhenNoRoom, replicas: int, spare: int, expected: str, knobs: dict[str, int]) -> None:
    decision = strategy.choose(policy, replicas, room(spare, free=4 * spare))
    assert decision.strategy == expected
    assert decision.rolling_update() == knobs


def test_the_reason_states_free_versus_needed_and_the_capacity_cost() -> None:
    decision = strategy.choose(WhenNoRoom.ReplaceInPlace, 3, room(0, free=2))
    assert decision.free_gpus == 2 and decision.needed_gpus == 4
    assert "2 GPUs free on usable NVIDIA-L40S nodes" in decision.reason
    assert "one more replica needs 4 GPUs on one node" in decision.reason
    assert "2 of 3 serve meanwhile" in decision.reason
    assert decision.unblock == ""  # it goes on by itself


def test_waiting_says_what_would_unblock_it() -> None:
    decision = strategy.choose(WhenNoRoom.Wait, 1, room(0, free=0))
    assert "keeps the only replica serving" in decision.reason
    assert "free 4 GPUs on one node for NVIDIA-L40S" in decision.unblock
    assert "whenNoRoom: ReplaceInPlace" in decision.unblock


def test_a_single_replica_replaced_in_place_warns_of_the_outage() -> None:
    decision = strategy.choose(WhenNoRoom.ReplaceInPlace, 1, room(0))
    assert "no serving until the new one is ready" in decision.reason


def test_groups_are_named_as_groups() -> None:
    decision = strategy.choose(WhenNoRoom.ReplaceInPlace, 2, room(0, per_node=8, nodes=2), unit="group")
    assert "one more group needs 16 GPUs (8 on each of 2 nodes)" in decision.reason
    assert "replacing one group at a time, 1 of 2 serve" in decision.reason


def test_unknown_room_replaces_in_place_and_rollback_says_so() -> None:
    assert strategy.choose(WhenNoRoom.Wait, 2, None).strategy == strategy.REPLACE_IN_PLACE
    back = strategy.choose(WhenNoRoom.ReplaceInPlace, 3, room(1, free=4), rollback=True)
    assert back.strategy == strategy.SURGE and back.reason.startswith("back to the previous version; room")


def test_decision_round_trips_through_its_annotation_form() -> None:
    decision = strategy.choose(WhenNoRoom.Wait, 1, room(0, free=1))
    assert strategy.Decision.from_dict(decision.to_dict()) == decision
    assert strategy.Decision.from_dict({"strategy": "Teleport"}) is None
    assert strategy.Decision.from_dict("junk") is None
