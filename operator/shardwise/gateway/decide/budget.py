"""A key's spend budget in USD per period (pure): the period's bounds, what was spent in it, the
429 past it, and the APIKey's `Budget` condition.

Periods are calendar periods in UTC (a Day from 00:00, a Month from the 1st), so every replica and
the status agree on when one ends without sharing a clock of their own; `Retry-After` is the
seconds to the period's end. Money is counted in micro-USD integers (the gatekeeper's unit) and
the budget read as a Decimal string, like the Providers' prices.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from decimal import Decimal, InvalidOperation

from shardwise import conditions
from shardwise.gateway.decide import openai_errors
from shardwise.gateway.decide.openai_errors import Refusal

DAY, MONTH = "Day", "Month"
PERIODS = (DAY, MONTH)
CONDITION = "Budget"
WITHIN, EXCEEDED = "WithinBudget", "BudgetExceeded"


@dataclasses.dataclass(frozen=True)
class Budget:
    micro_usd: int  # the budget, micro-USD
    period: str  # DAY or MONTH


def parse(budget_usd: object, period: object) -> Budget | str | None:
    """The budget from an APIKey's spec, None without one, or why it is not usable."""
    if budget_usd is None:
        return None
    if period is None:
        period = MONTH
    if period not in PERIODS:
        return f"spec.budgetPeriod must be one of {', '.join(PERIODS)}"
    try:
        amount = Decimal(str(budget_usd))
    except InvalidOperation:
        return "spec.budgetUSD must be a decimal number of USD"
    if not amount.is_finite() or amount <= 0:
        return "spec.budgetUSD must be a positive decimal number of USD"
    return Budget(int(amount * 1_000_000), str(period))


def bounds(now: datetime.datetime, period: str) -> tuple[datetime.datetime, datetime.datetime]:
    """[start, end) of the period holding `now` (UTC)."""
    now = now.astimezone(datetime.UTC)
    if period == DAY:
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + datetime.timedelta(days=1)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def spent_in(period_start: str, recorded_start: str | None, recorded_micro: int) -> int:
    """What was spent in the period starting `period_start`, from a record kept for `recorded_start`:
    a record of an earlier period counts nothing (a new period starts at zero)."""
    return recorded_micro if recorded_start == period_start else 0


def over(budget: Budget, spent_micro: int) -> bool:
    return spent_micro >= budget.micro_usd


def retry_after_s(now: datetime.datetime, period: str) -> int:
    return max(1, math.ceil((bounds(now, period)[1] - now).total_seconds()))


def refusal(key_id: str, budget: Budget, spent_micro: int, now: datetime.datetime) -> Refusal:
    wait = retry_after_s(now, budget.period)
    end = stamp(bounds(now, budget.period)[1])
    message = (f"Budget reached on key {key_id}: spent {usd(spent_micro)} USD of {usd(budget.micro_usd)} USD "
               f"this {budget.period.lower()} (UTC); the budget renews at {end}. Please try again in {wait}s.")
    return Refusal(429, openai_errors.body(message, "budget", code="insufficient_quota"),
                   (("content-type", openai_errors.JSON), ("retry-after", str(wait))))


def usd(micro: int) -> str:
    return f"{Decimal(micro) / 1_000_000:.6f}".rstrip("0").rstrip(".") or "0"


def condition(budget: Budget, spent_micro: int, period_end: str) -> conditions.Condition:
    if over(budget, spent_micro):
        return conditions.Condition(CONDITION, False, EXCEEDED,
                                    f"spent {usd(spent_micro)} USD of the {usd(budget.micro_usd)} USD budget this "
                                    f"{budget.period.lower()}: requests are refused (429) until {period_end}")
    return conditions.Condition(CONDITION, True, WITHIN,
                                f"spent {usd(spent_micro)} USD of the {usd(budget.micro_usd)} USD budget this "
                                f"{budget.period.lower()} (renews {period_end})")
