"""An APIKey's status from its usage and its health (pure): the patch to write, or None.

Usage is cumulative: the stored counters plus what was taken from the store since the last
write. Conditions: `Ready` (the key is usable, or why not: the key table's problem; usable but
exposed, reason `KeyInLastApplied`: the key table's warning, True so the key keeps working) and
`QuotaShared` (the status writer reached Redis on its last round: limits are shared by every
replica; False: the per-replica fallback applies). Nothing changed: no patch (no write).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from shardwise import conditions
from shardwise.gateway.decide import budget, quota


def desired_status(obj: Mapping[str, Any], usage: quota.Usage | None, *, problem: str | None,
                   key_hash: str | None, store_up: bool | None, now: str,
                   warning: str | None = None) -> dict[str, Any]:
    old = obj.get("status") or {}
    usage = usage or quota.Usage()
    requests = int(old.get("requests") or 0) + usage.requests
    prompt = int(old.get("promptTokens") or 0) + usage.prompt
    completion = int(old.get("completionTokens") or 0) + usage.completion
    cost = round(float(old.get("costUSD") or 0.0) + usage.cost_micro_usd / 1e6, 6)
    if problem is not None:
        ready = conditions.Condition("Ready", False, "KeyNotUsable", problem)
    elif warning is not None:
        ready = conditions.Condition("Ready", True, "KeyInLastApplied", f"the gateway accepts this key, but {warning}")
    else:
        ready = conditions.Condition("Ready", True, "KeyActive", "the gateway accepts this key")
    updates = [ready]
    if store_up is not None:
        updates.append(conditions.Condition("QuotaShared", True, "StoreReachable",
                                            "limits are shared by every gateway replica (Redis)") if store_up
                       else conditions.Condition("QuotaShared", False, "StoreUnreachable",
                                                 "Redis is unreachable: each gateway replica applies its "
                                                 "share of the limits"))
    generation = (obj.get("metadata") or {}).get("generation")
    status: dict[str, Any] = {
        "requests": requests, "promptTokens": prompt, "completionTokens": completion,
        "totalTokens": prompt + completion, "costUSD": cost,
        "rateLimited": int(old.get("rateLimited") or 0) + usage.limited,
        "keyId": key_hash[:12] if key_hash else old.get("keyId"),
        "conditions": conditions.merge(list(old.get("conditions") or []), updates, generation=generation, now=now),
        "observedGeneration": generation,
    }
    status["lastUsed"] = now if usage.requests else old.get("lastUsed")
    spec = obj.get("spec") or {}
    limit = budget.parse(spec.get("budgetUSD"), spec.get("budgetPeriod"))
    if isinstance(limit, budget.Budget):
        start, end = budget.bounds(datetime.datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC), limit.period)
        period = budget.stamp(start)
        try:
            recorded = round(float(old.get("periodCostUSD") or 0) * 1e6)
        except (TypeError, ValueError):
            recorded = 0
        # the period's usage since the last write lands in this period (a write a second late at
        # its turn counts that second's usage in the new period: the budget errs towards the caller)
        spent = budget.spent_in(period, old.get("periodStart"), recorded) + usage.cost_micro_usd
        status["periodStart"], status["periodCostUSD"] = period, round(spent / 1e6, 6)
        status["conditions"] = conditions.merge(status["conditions"], [budget.condition(limit, spent,
                                                                                        budget.stamp(end))],
                                                generation=generation, now=now)
    return status


def patch_for(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch from the stored status to `desired`, None when they agree."""
    old = obj.get("status") or {}
    patch = {k: v for k, v in desired.items() if old.get(k) != v and not (v is None and k not in old)}
    return patch or None
