"""What the autoscaler learns about one deployment, from its own measurements: the load per replica
at which the SLO holds, how long a replica takes to start, and the request-rate forecast.

Capacity. Every settled evaluation (nothing starting, no queue at either end of the window, not a
burst) is a sample: the requests per second each ready replica served, and whether every p95 met
its SLO, counted in load bins 5 % wide (so every load range the deployment ran at is remembered,
not only the last hours'). The safe load per replica is the threshold t that best separates the two, counting a
breach at or below t as `(1 - p) / p` times worse than a met SLO above it, with p = 5 %: the
threshold where about one period in twenty breaches, the same share a p95 allows its requests.
This is the weighted decision stump (the cost-sensitive one-threshold classifier): no model of
latency versus load is assumed, so it holds for whatever curve the engines have, and noise near
the boundary moves it only as far as the evidence does. Until the SLO has broken at least once,
the capacity above the highest load served is unknown: `breaking_known` is False, and sizing stays
with the latency signals alone (scale-ups reactive, scale-downs by the latency projection).

Throughput: the most requests per second one ready replica served while a queue stood at both
ends of a window (every replica busy); it is how fast a queue drains.

Start time: the mean of the measured starts (from the first evaluation that added a replica to
the first that found none starting), the newest weighing half, so one slow pull does not set it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from shardwise.autoscale import forecast as forecast_mod

# One period in twenty over the SLO at the learned load: the share a p95 allows its requests.
BREACH_SHARE = 0.05
# Load bins 5 % wide: finer than the noise of a 30 s window's rate, coarse enough to store.
_BIN_RATIO = 1.05
# Samples a bin remembers before it halves: an hour of 30 s periods spent in one load range.
_BIN_CAP = 120


@dataclasses.dataclass(frozen=True)
class Sample:
    load: float  # requests per second per ready replica
    met: bool  # every p95 within its SLO


def _bin(load: float) -> int:
    return math.floor(math.log(max(load, 1e-6)) / math.log(_BIN_RATIO))


def _bin_load(index: int) -> float:
    """A bin's upper edge, 5 % above its lowest load: the load the replicas were seen to carry
    is never itself judged too much."""
    return float(_BIN_RATIO ** (index + 1))


@dataclasses.dataclass(frozen=True)
class Learned:
    """The per-deployment state behind forecasts and sizing; immutable, with a stored form.

    `bins` counts samples by load per replica, in bins 5 % wide: (bin, met, breached). A bin
    whose count reaches `_BIN_CAP` halves both, so each load range remembers its newest evidence
    and every range the deployment has run at stays remembered.
    """

    bins: tuple[tuple[int, int, int], ...] = ()
    startup_s: float | None = None
    forecast: forecast_mod.Forecast | None = None
    idle_since: float | None = None
    # Requests per second one replica serves flat out: the highest seen while a queue stood.
    throughput_rps: float | None = None

    def with_throughput(self, rps: float) -> Learned:
        if not rps > 0:
            return self
        return dataclasses.replace(self, throughput_rps=max(rps, self.throughput_rps or 0.0))

    def with_sample(self, sample: Sample) -> Learned:
        index = _bin(sample.load)
        counts = {b: (m, x) for b, m, x in self.bins}
        met, broke = counts.get(index, (0, 0))
        met, broke = met + int(sample.met), broke + int(not sample.met)
        if met + broke > _BIN_CAP:
            met, broke = met // 2, broke // 2 + (broke % 2 if not sample.met else 0)
        counts[index] = (met, broke)
        return dataclasses.replace(self, bins=tuple((b, m, x) for b, (m, x) in sorted(counts.items())))

    def with_startup(self, seconds: float) -> Learned:
        previous = self.startup_s
        value = seconds if previous is None else (previous + seconds) / 2
        return dataclasses.replace(self, startup_s=value)

    @property
    def breaking_known(self) -> bool:
        """Whether the SLO has been seen to break at a load above one where it held."""
        met = [b for b, m, _ in self.bins if m]
        return bool(met) and any(x and b >= min(met) for b, _, x in self.bins)

    @property
    def safe_rps(self) -> float | None:
        """Requests per second per replica at which the SLO holds (see the module docstring)."""
        return safe_load(self.bins)


def safe_load(bins: Iterable[tuple[int, int, int]]) -> float | None:
    """The cost-weighted threshold between met and breached samples; None without a met one."""
    ordered = sorted(bins)
    if not any(m for _, m, _ in ordered):
        return None
    weight = (1 - BREACH_SHARE) / BREACH_SHARE
    # Cost of threshold t: weight x breaches with load <= t + met samples with load > t.
    met_above = sum(m for _, m, _ in ordered)
    breaches_below = 0
    best_cost, best = math.inf, None
    for index, met, broke in ordered:
        met_above -= met
        breaches_below += broke
        cost = weight * breaches_below + met_above
        if met and cost < best_cost:
            best_cost, best = cost, _bin_load(index)
    return best


def to_dict(learned: Learned) -> dict[str, object]:
    """The stored form: samples as [load, met] pairs rounded to 3 figures."""
    out: dict[str, object] = {"loadBins": [list(b) for b in learned.bins]}
    if learned.startup_s is not None:
        out["startupSeconds"] = round(learned.startup_s, 1)
    if learned.forecast is not None:
        out["forecast"] = forecast_mod.to_dict(learned.forecast)
    if learned.idle_since is not None:
        out["idleSince"] = round(learned.idle_since, 1)
    if learned.throughput_rps is not None:
        out["throughputPerReplica"] = float(f"{learned.throughput_rps:.3g}")
    return out


def from_dict(data: object) -> Learned:
    """What `to_dict` stored; anything unreadable is left out rather than guessed."""
    if not isinstance(data, dict):
        return Learned()
    bins = []
    for entry in data.get("loadBins") or ():
        try:
            index, met, broke = int(entry[0]), int(entry[1]), int(entry[2])
        except (TypeError, ValueError, IndexError):
            continue
        if met >= 0 and broke >= 0:
            bins.append((index, met, broke))
    return Learned(bins=tuple(sorted(bins)),
                   startup_s=_positive(data.get("startupSeconds")),
                   forecast=forecast_mod.from_dict(data.get("forecast")),
                   idle_since=_finite(data.get("idleSince")),
                   throughput_rps=_positive(data.get("throughputPerReplica")))


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _positive(value: object) -> float | None:
    number = _finite(value)
    return number if number is not None and number > 0 else None
