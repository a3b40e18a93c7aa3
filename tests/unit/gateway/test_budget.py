"""A key's USD budget per period: the calendar arithmetic, the 429, the status and the gatekeeper."""

from __future__ import annotations

import asyncio
import datetime

from shardwise.gateway.decide import budget, keys, keystatus
from shardwise.gateway.service.gatekeeper import AuthSettings, Gatekeeper

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_periods_are_calendar_periods_in_utc_and_december_rolls_into_january() -> None:
    assert budget.bounds(at("2026-12-05T15:06:34"), budget.DAY) == (at("2026-12-05T00:00:00"), at("2026-12-06T00:00:00"))
    assert budget.bounds(at("2026-12-31T23:59:59"), budget.MONTH) == (at("2026-12-01T00:00:00"), at("2027-01-01T00:00:00"))
    assert budget.bounds(at("2026-02-10T01:00:00"), budget.MONTH)[1] == at("2026-03-01T00:00:00")
    assert budget.retry_after_s(at("2026-12-05T23:59:30"), budget.DAY) == 30
    assert budget.retry_after_s(at("2026-12-05T23:59:59.9"), budget.DAY) == 1


def test_parse_refuses_what_is_not_a_positive_amount_or_a_known_period() -> None:
    assert budget.parse(None, "Day") is None
    assert budget.parse("2.50", None) == budget.Budget(2_500_000, budget.MONTH)
    assert isinstance(budget.parse("0", "Day"), str)
    assert isinstance(budget.parse("ten", "Day"), str)
    assert isinstance(budget.parse("1", "Week"), str)


def test_a_record_of_an_earlier_period_counts_nothing() -> None:
    assert budget.spent_in("2026-12-05T00:00:00Z", "2026-12-05T00:00:00Z", 7) == 7
    assert budget.spent_in("2026-12-06T00:00:00Z", "2026-12-05T00:00:00Z", 7) == 0


def test_refusal_is_a_429_with_the_reason_and_retry_after_to_the_period_end() -> None:
    limit = budget.Budget(1_000_000, budget.DAY)
    refused = budget.refusal("ns/k", limit, 1_200_000, at("2026-12-05T23:00:00"))
    assert refused.status == 429
    assert dict(refused.headers)["retry-after"] == "3600"
    assert refused.error["type"] == "budget" and refused.error["code"] == "insufficient_quota"
    assert "1.2 USD of 1 USD" in refused.error["message"] and "2026-12-06T00:00:00Z" in refused.error["message"]


def apikey(status: dict | None = None, **spec: object) -> dict:
    return {"metadata": {"name": "k", "namespace": "ns", "generation": 1},
            "spec": {"secretName": "s", **spec}, "status": status or {}}


def test_status_counts_the_period_and_says_when_the_budget_is_spent() -> None:
    from shardwise.gateway.decide import quota
    obj = apikey(budgetUSD="1", budgetPeriod="Day")
    first = keystatus.desired_status(obj, quota.Usage(requests=1, cost_micro_usd=600_000), problem=None,
                                     key_hash=None, store_up=None, now="2026-12-05T10:00:00Z")
    assert first["periodStart"] == "2026-12-05T00:00:00Z" and first["periodCostUSD"] == 0.6
    cond = next(c for c in first["conditions"] if c["type"] == "Budget")
    assert (cond["status"], cond["reason"]) == ("True", budget.WITHIN)
    obj["status"] = first
    second = keystatus.desired_status(obj, quota.Usage(requests=1, cost_micro_usd=500_000), problem=None,
                                      key_hash=None, store_up=None, now="2026-12-05T11:00:00Z")
    cond = next(c for c in second["conditions"] if c["type"] == "Budget")
    assert second["periodCostUSD"] == 1.1 and (cond["status"], cond["reason"]) == ("False", budget.EXCEEDED)
    obj["status"] = second
    next_day = keystatus.desired_status(obj, None, problem=None, key_hash=None, store_up=None,
                                        now="2026-12-06T00:00:01Z")
    cond = next(c for c in next_day["conditions"] if c["type"] == "Budget")
    assert next_day["periodCostUSD"] == 0 and cond["status"] == "True"
    assert next_day["costUSD"] == 1.1  # the all-time cost is not reset
    assert not any(c["type"] == "Budget" for c in keystatus.desired_status(
        apikey(), None, problem=None, key_hash=None, store_up=None, now="2026-12-06T00:00:01Z")["conditions"])


def test_gatekeeper_refuses_once_spent_from_its_own_charges_or_the_status_and_not_the_next_period() -> None:
    now = [at("2026-12-05T10:00:00")]
    gate = Gatekeeper(AuthSettings(), cost_of=lambda m, p, c, cached: 400_000, wall=lambda: now[0])
    key = keys._policy(apikey(budgetUSD="1", budgetPeriod="Day"))
    assert isinstance(key, keys.Key) and key.limited  # never admitted by Envoy's keyed fast path
    gate.set_table(keys.KeyTable(by_hash={"h": key}, problems={}))
    for _ in range(3):
        assert getattr(asyncio.run(gate.admit(key)), "status", None) != 429
        gate.charge(key.id, "m", 10, 10)
    refused = asyncio.run(gate.admit(key))
    assert getattr(refused, "status", None) == 429
    now[0] = at("2026-12-06T00:00:00")
    assert getattr(asyncio.run(gate.admit(key)), "status", None) != 429
    # a replica that charged nothing learns the spend from the status (another replica's, or its own before a restart)
    fresh = Gatekeeper(AuthSettings(), wall=lambda: at("2026-12-05T12:00:00"))
    told = keys._policy(apikey({"periodStart": "2026-12-05T00:00:00Z", "periodCostUSD": 1.0},
                               budgetUSD="1", budgetPeriod="Day"))
    assert getattr(asyncio.run(fresh.admit(told)), "status", None) == 429
    stale = keys._policy(apikey({"periodStart": "2026-12-04T00:00:00Z", "periodCostUSD": 5.0},
                                budgetUSD="1", budgetPeriod="Day"))
    assert getattr(asyncio.run(fresh.admit(stale)), "status", None) != 429
