"""Event webhooks (issue 43): what changed, found by comparing two snapshots (pure; docs/usage-export.md).

Four kinds, each one event per transition and none while the state stays where it is:
- `key.quota`: a key's use of a per-minute quota (requests or tokens) crossed 80 % or 100 %
  (`quota_events`); falling back below 80 % re-arms it, so the next climb is a new transition;
- `key.revoked`: a key that could be used is gone from the key table (its APIKey or Secret deleted);
- `provider.unhealthy` / `provider.healthy`: a Provider's `Reachable` condition turned False / back True;
- `deployment.slo`: a deployment's SLO state (`met`, `missed`, `unknown`: the console's reading of
  its `SLOMet` condition) changed.

An event's `id` is derived from what changed (type, subject, new state and, where the object has
one, the condition's lastTransitionTime), not drawn at random: every gateway replica watches the
same objects and may send the same transition, and a retried delivery repeats it; a receiver that
deduplicates by `id` sees each transition once. The schema is versioned like the usage record's.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from collections.abc import Mapping
from typing import Any

EVENT_SCHEMA_VERSION = 1
KEY_QUOTA, KEY_REVOKED = "key.quota", "key.revoked"
PROVIDER_UNHEALTHY, PROVIDER_HEALTHY = "provider.unhealthy", "provider.healthy"
DEPLOYMENT_SLO = "deployment.slo"
THRESHOLDS = (80, 100)  # percent of a quota; each crossing upwards is one event


def event_id(kind: str, subject: str, *parts: object) -> str:
    digest = hashlib.sha256("\x1f".join([kind, subject, *map(str, parts)]).encode()).hexdigest()
    return f"evt_{digest[:32]}"


def event(kind: str, subject: str, data: Mapping[str, Any], *, id_parts: tuple[object, ...],
          now_unix_s: float) -> dict[str, Any]:
    return {"version": EVENT_SCHEMA_VERSION, "id": event_id(kind, subject, *id_parts), "type": kind,
            "subject": subject, "data": dict(data),
            "time": datetime.datetime.fromtimestamp(now_unix_s, datetime.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z")}


# -- quotas -----------------------------------------------------------------------------------
def level_of(used: float, limit: float | None) -> int:
    """The highest threshold (percent) `used` reached of `limit`; 0 below the first or without a limit."""
    if not limit or limit <= 0:
        return 0
    share = used * 100 / limit
    return max((t for t in THRESHOLDS if share >= t), default=0)


@dataclasses.dataclass(frozen=True)
class QuotaUse:
    """A key's use of one quota over its window: requests or tokens in the last minute."""

    key_id: str
    quota: str  # "requests_per_minute", "tokens_per_minute" (and "budget_usd" once keys carry one)
    used: float
    limit: float | None
    window: str = ""  # the window's name in the id (a minute's or a budget period's start): a new
    # window's crossing is a new transition even if the level never fell in between


def quota_events(armed: Mapping[tuple[str, str], int], uses: list[QuotaUse],
                 now_unix_s: float) -> tuple[list[dict[str, Any]], dict[tuple[str, str], int]]:
    """(events, the new levels) from the levels already reported per (key, quota).

    One event per threshold crossed upwards (80 then 100 in one step: the 100 only, it says both);
    none while the level stays; a use below the first threshold forgets the level. A quota no longer in
    `uses` (the key or its limit gone) is forgotten too."""
    events: list[dict[str, Any]] = []
    levels: dict[tuple[str, str], int] = {}
    for use in uses:
        slot = (use.key_id, use.quota)
        before = armed.get(slot, 0)
        level = level_of(use.used, use.limit)
        if level > before:
            events.append(event(KEY_QUOTA, use.key_id, {
                "quota": use.quota, "percent": level, "used": use.used, "limit": use.limit},
                id_parts=(use.quota, level, use.window or int(now_unix_s // 60)), now_unix_s=now_unix_s))
            levels[slot] = level
        elif level > 0:  # still at or above 80 %: what was told stays told
            levels[slot] = before
        # else below 80 %: re-armed, nothing kept
    return events, levels


# -- keys -------------------------------------------------------------------------------------
def revoked_events(before: Mapping[str, str], after: Mapping[str, str], now_unix_s: float) -> list[dict[str, Any]]:
    """A key usable before and not after: revoked. Keys by id -> a version (the APIKey's uid and
    resourceVersion, or anything that changes when the key is recreated) for the event's id."""
    return [event(KEY_REVOKED, key_id, {}, id_parts=(version,), now_unix_s=now_unix_s)
            for key_id, version in sorted(before.items()) if key_id not in after]


# -- conditions (providers, deployments) ------------------------------------------------------
def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    return next((c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == kind), None)


def provider_health(providers: list[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """namespace/name -> (Reachable's status, its lastTransitionTime) for each Provider that has one."""
    out: dict[str, tuple[str, str]] = {}
    for obj in providers:
        meta = obj.get("metadata") or {}
        found = condition(obj, "Reachable")
        if found is not None:
            out[f"{meta.get('namespace')}/{meta.get('name')}"] = (str(found.get("status")),
                                                                   str(found.get("lastTransitionTime") or ""))
    return out


def provider_events(before: Mapping[str, tuple[str, str]], after: Mapping[str, tuple[str, str]],
                    now_unix_s: float) -> list[dict[str, Any]]:
    """Reachable turning False (unhealthy), or from False back to True (healthy). A provider seen
    first already False is unhealthy news too (a gateway that just started still tells it; the id,
    from the condition's transition time, is the one any replica that saw it turn would send)."""
    events: list[dict[str, Any]] = []
    for name, (status, since) in sorted(after.items()):
        was = before.get(name, ("", ""))[0]
        if status == "False" and was != "False":
            events.append(event(PROVIDER_UNHEALTHY, name, {"reachable": False, "since": since},
                                id_parts=(status, since), now_unix_s=now_unix_s))
        elif status == "True" and was == "False":
            events.append(event(PROVIDER_HEALTHY, name, {"reachable": True, "since": since},
                                id_parts=(status, since), now_unix_s=now_unix_s))
    return events


def slo_state(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(met | missed | unknown, since) as the console reads an InferenceDeployment's SLOMet; None: no
    SLO. The gateway's informer keeps only the console's figures of it (no transition time)."""
    figures = obj.get("console")
    slo = figures.get("slo") if isinstance(figures, Mapping) else None
    found = slo if isinstance(slo, Mapping) else condition(obj, "SLOMet")
    if found is None:
        return None
    return ({"True": "met", "False": "missed"}.get(str(found.get("status")), "unknown"),
            str(found.get("lastTransitionTime") or ""))


def slo_states(deployments: list[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for obj in deployments:
        meta = obj.get("metadata") or {}
        state = slo_state(obj)
        if state is not None:
            out[f"{meta.get('namespace')}/{meta.get('name')}"] = state
    return out


def slo_events(before: Mapping[str, tuple[str, str]], after: Mapping[str, tuple[str, str]],
               now_unix_s: float, *, first_sight: bool = False) -> list[dict[str, Any]]:
    """A deployment whose SLO state differs from before. `first_sight`: the gateway's first look
    (nothing to compare with) sends nothing: a restart is not a change."""
    if first_sight:
        return []
    return [event(DEPLOYMENT_SLO, name, {"state": state, "previous": before.get(name, ("none", ""))[0],
                                         "since": since}, id_parts=(state, since), now_unix_s=now_unix_s)
            for name, (state, since) in sorted(after.items()) if before.get(name, ("none", ""))[0] != state]
