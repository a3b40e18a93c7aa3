"""Which Events a status change deserves: one per transition a person wants to know about.

A new plan, a rollout starting (with its strategy and why), readiness, and every failure reason
the first time it appears. Judged from the stored status against the new one, never from the
process's memory, so a restarted operator does not announce again what is already known.
"""

from __future__ import annotations

from typing import Any

from shardwise import conditions

Announcement = tuple[str, str, str]  # (type, reason, message)


def transitions(old_status: dict[str, Any], new_status: dict[str, Any]) -> list[Announcement]:
    """(type, reason, message) of events for conditions that flipped, plans that changed and
    rollouts that started (with their strategy and why)."""
    out: list[Announcement] = []
    old_plan, new_plan = old_status.get("plan") or {}, new_status.get("plan") or {}
    def shape(plan: dict[str, Any]) -> tuple[Any, ...]:
        return (plan.get("tensorParallel"), plan.get("pipelineParallel"), plan.get("dataParallel") or 1,
                plan.get("expertParallel") or 1, plan.get("gpuProduct"))

    if new_plan.get("feasible") and shape(old_plan) != shape(new_plan):
        dp, ep = int(new_plan.get("dataParallel") or 1), int(new_plan.get("expertParallel") or 1)
        words = f"TP {new_plan['tensorParallel']} x PP {new_plan['pipelineParallel']}"
        if dp > 1 or ep > 1:  # EP/DP layouts by their label (DP8xTP1xEP8), as LAYOUT shows them
            words = str(new_plan.get("layout") or words)
        out.append(("Normal", "Planned", f"{words} on {new_plan.get('gpuProduct')}: {new_plan.get('reason', '')}"))
    old_rollout, new_rollout = old_status.get("rollout") or {}, new_status.get("rollout") or {}
    if new_rollout.get("revision") and new_rollout.get("revision") != old_rollout.get("revision"):
        out.append(("Normal", "RolloutStarted", f"{new_rollout.get('strategy')}: {new_rollout.get('reason', '')}"))
    for cond in new_status.get("conditions") or []:
        before = conditions.find(old_status.get("conditions"), cond["type"])
        if before is not None and before.get("status") == cond["status"] and before.get("reason") == cond["reason"]:
            continue
        if cond["type"] == "Ready" and cond["status"] == "True":
            out.append(("Normal", "Ready", cond["message"] or "all replicas ready"))
        elif cond["type"] in ("Degraded", "ReplicasIgnored", "DtypeIgnored") and cond["status"] == "True":
            out.append(("Warning", cond["reason"], cond["message"]))
        elif cond["type"] in ("Planned", "Routed") and cond["status"] == "False":
            out.append(("Warning", cond["reason"], cond["message"]))
        elif cond["type"] == "AdaptersReady" and cond["reason"] != "AdaptersLoading":
            # A refused adapter (rank above the limit, files missing) and the recovery, once each.
            out.append(("Normal" if cond["status"] == "True" else "Warning", cond["reason"], cond["message"]))
    # Planned=False and Degraded=True usually carry the same reason: one event per (type, reason).
    seen: set[tuple[str, str]] = set()
    return [e for e in out if (e[0], e[1]) not in seen and not seen.add((e[0], e[1]))]
