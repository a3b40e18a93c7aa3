"""Which strategy a rollout uses, chosen once when it starts, from the room for one more replica.

- Surge (maxSurge 1, maxUnavailable 0): one more replica fits on free GPUs, so the new version
  starts beside the old and serving never drops.
- ReplaceInPlace (maxSurge 0, maxUnavailable 1): no room. One replica (a whole group for a
  LeaderWorkerSet) is stopped, and its GPUs start the new version; capacity drops by one replica
  until the rollout ends. With several replicas the others keep serving; a single replica has a
  short outage, which `spec.rollout.whenNoRoom: ReplaceInPlace` (the default) accepts.
- WaitForRoom (rendered as a surge): no room, one replica, and `whenNoRoom: Wait`. The only
  replica keeps serving; the new one stays Pending until a replica's GPUs are free, and the
  scheduler places it the moment they are (another workload deleted or scaled down).

Worked example: 3 replicas of 4 GPUs on three full 4-GPU L40S nodes: the deployment's own pods
count as its own, so the nodes hold 3 replicas and 3 are wanted, 0 spare: ReplaceInPlace, "2 of
3 serve meanwhile". A fourth node with 4 free GPUs makes 1 spare: Surge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.api.v1alpha1 import WhenNoRoom
from shardwise.rollout.room import Room

SURGE = "Surge"
REPLACE_IN_PLACE = "ReplaceInPlace"
WAIT_FOR_ROOM = "WaitForRoom"
STRATEGIES = (SURGE, REPLACE_IN_PLACE, WAIT_FOR_ROOM)

# The rolling-update knobs of a Deployment and of a LeaderWorkerSet (per group) alike.
_ROLLING_UPDATE = {
    SURGE: {"maxSurge": 1, "maxUnavailable": 0},
    WAIT_FOR_ROOM: {"maxSurge": 1, "maxUnavailable": 0},
    REPLACE_IN_PLACE: {"maxSurge": 0, "maxUnavailable": 1},
}


@dataclass(frozen=True)
class Decision:
    """A rollout's strategy and why; stored on the workload, so it is kept for the whole rollout."""

    strategy: str
    reason: str
    free_gpus: int | None = None
    needed_gpus: int | None = None
    unblock: str = ""  # what would let it go on, when it waits for GPUs

    def rolling_update(self) -> dict[str, int]:
        return dict(_ROLLING_UPDATE[self.strategy])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"strategy": self.strategy, "reason": self.reason}
        if self.free_gpus is not None:
            out["freeGPUs"] = self.free_gpus
        if self.needed_gpus is not None:
            out["neededGPUs"] = self.needed_gpus
        if self.unblock:
            out["unblock"] = self.unblock
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Decision | None:
        """The decision a workload carries; None when it carries none or one we cannot read."""
        if not isinstance(data, dict) or data.get("strategy") not in STRATEGIES:
            return None
        free, needed = data.get("freeGPUs"), data.get("neededGPUs")
        return cls(strategy=data["strategy"], reason=str(data.get("reason") or ""),
                   free_gpus=free if isinstance(free, int) else None,
                   needed_gpus=needed if isinstance(needed, int) else None,
                   unblock=str(data.get("unblock") or ""))


# Before any rollout (a new workload): the surge knobs the workload has always had.
INITIAL = Decision(SURGE, "")


def choose(when_no_room: WhenNoRoom, replicas: int, room: Room | None, *, unit: str = "replica",
           rollback: bool = False) -> Decision:
    """The strategy for a rollout of `replicas` replicas (`unit`: "replica" or "group").

    A rollback (the spec reverted to the version the workload replaced) is chosen for like any
    rollout, from the GPUs free now, and says so.
    """
    decision = _choose(when_no_room, replicas, room, unit)
    if rollback:
        return Decision(**{**decision.__dict__, "reason": f"back to the previous version; {decision.reason}"})
    return decision


def _choose(when_no_room: WhenNoRoom, replicas: int, room: Room | None, unit: str) -> Decision:
    if replicas == 0:
        return Decision(SURGE, f"no {unit}s run: nothing to replace")
    if room is None:
        return Decision(REPLACE_IN_PLACE, f"free GPUs unknown (no usable plan): replacing one {unit} at a time")
    free = f"{room.free_gpus} GPU{'' if room.free_gpus == 1 else 's'} free on usable {room.product} nodes"
    need = f"one more {unit} needs {room.need()}"
    numbers = {"free_gpus": room.free_gpus, "needed_gpus": room.gpus_per_replica}
    if room.spare_replicas >= 1:
        return Decision(SURGE, f"room for one more {unit}: {free}, {need}", **numbers)
    no_room = f"no room for one more {unit}: {free}, {need} ({room.shortfall})"
    if replicas == 1 and when_no_room is WhenNoRoom.Wait:
        return Decision(
            WAIT_FOR_ROOM,
            f"{no_room}; whenNoRoom Wait keeps the only {unit} serving until the new one fits",
            unblock=f"free {room.need()} for {room.product} (delete or scale down another workload), "
                    "or set spec.rollout.whenNoRoom: ReplaceInPlace to accept a short outage",
            **numbers)
    if replicas == 1:
        return Decision(REPLACE_IN_PLACE, f"{no_room}; replacing the only {unit}: no serving until the new "
                                          "one is ready (whenNoRoom ReplaceInPlace)", **numbers)
    return Decision(REPLACE_IN_PLACE, f"{no_room}; replacing one {unit} at a time, {replicas - 1} of "
                                      f"{replicas} serve meanwhile", **numbers)
