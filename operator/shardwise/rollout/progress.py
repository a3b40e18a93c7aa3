"""How far a rollout has got, from the live workload's pods: status.rollout and its conditions.

States, first match wins:
- Failed: a pod of the new version cannot start (image pull, configuration, crash loop, OOM, in
  the kubelet's words as controller.workload_health reads them). The old replicas keep serving
  (a surge never stopped one; replace-in-place stopped one at most), and reverting the spec rolls
  back to them.
- Blocked: a pod of the new version finds no node: no room, as chosen (WaitForRoom) or because
  the room seen when the rollout started was taken since. Says the GPUs needed and free. Not
  while an old pod is still terminating (its GPUs are on their way: the grace period), nor when
  a usable node has the GPUs free now (the scheduler has yet to retry).
- Complete: as many ready serving pods of the new version as replicas wanted, none of the old.
- InProgress: otherwise, naming the pod (or group) now loading.
Counts are of serving pods: leaders for a LeaderWorkerSet, whose group is ready with its leader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shardwise.conditions import Condition
from shardwise.rollout import pods as pod_state
from shardwise.rollout.room import Room
from shardwise.rollout.strategy import WAIT_FOR_ROOM, Decision

IN_PROGRESS, BLOCKED, FAILED, COMPLETE = "InProgress", "Blocked", "Failed", "Complete"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"


@dataclass(frozen=True)
class View:
    state: str
    status: dict[str, Any]  # status.rollout
    conditions: tuple[Condition, ...] = field(default=())  # replace the base Progressing/Degraded

    @property
    def active(self) -> bool:
        return self.state != COMPLETE


def _templates(rendered: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(serving pod template, worker template or None) of a rendered workload."""
    spec = rendered.get("spec") or {}
    if rendered.get("kind") == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        return lwt.get("leaderTemplate") or {}, lwt.get("workerTemplate") or {}
    return spec.get("template") or {}, None


def _is_worker(pod: dict[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(WORKER_INDEX_LABEL, "0") != "0"


def _is_new(pod: dict[str, Any], serving: dict[str, Any], worker: dict[str, Any] | None) -> bool:
    if worker is not None and _is_worker(pod):
        return pod_state.of_template(pod, worker)
    return pod_state.of_template(pod, serving)


def _name(pod: dict[str, Any], group: bool) -> str:
    meta = pod.get("metadata") or {}
    if group:
        index = (meta.get("labels") or {}).get(GROUP_INDEX_LABEL)
        if index is not None:
            return f"group {index} (pod {meta.get('name')})"
    return f"pod {meta.get('name')}"


def _where(pod: dict[str, Any]) -> str:
    node = (pod.get("spec") or {}).get("nodeName")
    return f" on {node}" if node else ""


@dataclass(frozen=True)
class Versions:
    """The deployment's pods, sorted by version (all roles; terminating ones apart)."""

    new: tuple[dict[str, Any], ...]  # made from the rendered templates, not terminating
    new_serving: tuple[dict[str, Any], ...]  # of those, the ones that serve (leaders of groups)
    old_serving: tuple[dict[str, Any], ...]  # serving pods of an older version, not terminating
    releasing: tuple[dict[str, Any], ...]  # terminating pods on a node: GPUs about to be free
    ready: int  # ready serving pods of any version


def versions(rendered: dict[str, Any], pods: Sequence[dict[str, Any]]) -> Versions:
    serving_template, worker_template = _templates(rendered)
    ordered = sorted(pods, key=lambda p: p["metadata"]["name"])
    live = [p for p in ordered if not pod_state.terminating(p)]
    new = [p for p in live if _is_new(p, serving_template, worker_template)]
    return Versions(
        new=tuple(new),
        new_serving=tuple(p for p in new if not _is_worker(p)),
        old_serving=tuple(p for p in live if p not in new and not _is_worker(p)),
        releasing=tuple(p for p in ordered if pod_state.terminating(p) and (p.get("spec") or {}).get("nodeName")),
        ready=sum(1 for p in live if not _is_worker(p) and pod_state.ready(p)),
    )


def view(decision: Decision, *, revision: str, previous: str | None, rendered: dict[str, Any],
         pods: Versions, replicas: int, failure: tuple[str, str] | None = None, waiting: str | None = None,
         room: Room | None = None) -> View:
    """The rollout's state and status.

    `failure` is (reason, message) of the new version's pods that cannot start and `waiting` the
    scheduler's words for one that found no node (both from controller.workload_health, over
    `pods.new`). `room`, when given, is measured now, for a Blocked rollout's message; the
    decision keeps the figures from when the rollout started.
    """
    group = rendered.get("kind") == "LeaderWorkerSet"
    unit = "group" if group else "replica"
    updated = min(replicas, sum(1 for p in pods.new_serving if pod_state.ready(p)))
    loading = next((p for p in pods.new_serving if not pod_state.ready(p) and (p.get("spec") or {}).get("nodeName")),
                   None)

    progress = f"{updated}/{replicas} {unit}s updated, {pods.ready} serving"
    out: dict[str, Any] = {"revision": revision, **({"previousRevision": previous} if previous else {}),
                           **decision.to_dict(), "updatedReplicas": updated, "replicas": replicas}
    out.pop("unblock", None)
    conds: list[Condition] = []
    if failure is not None:
        state = FAILED
        text = (f"{decision.strategy}: the new version cannot start: {failure[1]}; {progress} (the old version "
                "keeps serving; fix the spec or revert it to roll back)")
        conds = [Condition("Progressing", False, "RolloutFailed", text),
                 Condition("Degraded", True, "RolloutFailed", text)]
    elif waiting is not None and not pods.releasing and not (room is not None and room.pod_fits_now):
        state = BLOCKED
        if room is not None:
            fits = f"needs {room.need()}, {room.free_gpus} free on usable {room.product} nodes"
        elif decision.needed_gpus is not None:
            fits = f"needs {decision.needed_gpus} GPUs, {decision.free_gpus} were free when it started"
        else:
            fits = waiting
        unblock = decision.unblock or "free the GPUs of one replica (delete or scale down another workload)"
        text = f"{decision.strategy}: the new version waits for GPUs: {fits}; {progress}; to unblock: {unblock}"
        out["unblock"] = unblock
        conds = [Condition("Progressing", True, "RolloutBlocked", text),
                 Condition("Degraded", True, "RolloutBlocked", text)]
    elif updated >= replicas and not pods.old_serving:
        state = COMPLETE
        text = f"{decision.strategy}: {replicas} {unit}{'' if replicas == 1 else 's'} updated"
    else:
        state = IN_PROGRESS
        doing = f"; {_name(loading, group)} loading{_where(loading)}" if loading is not None else ""
        conds = []
        if waiting is not None:  # GPUs on their way or already free: the normal pace, not degraded
            if pods.releasing:
                doing += f"; a new pod waits for the GPUs of terminating {_name(pods.releasing[0], group)}"
            else:
                doing += "; GPUs for the new pod are free, the scheduler has yet to place it"
            conds.append(Condition("Degraded", False, "AsExpected", ""))
        elif decision.strategy == WAIT_FOR_ROOM and loading is None and not pods.new_serving:
            doing = "; waiting for the scheduler to place the new version"
        text = f"{decision.strategy}: {progress}{doing}"
        conds.insert(0, Condition("Progressing", True, "RollingOut", text))
    out["state"] = state
    out["message"] = text
    if loading is not None and state == IN_PROGRESS:
        out["loading"] = _name(loading, group) + _where(loading)
    return View(state, out, tuple(conds))
