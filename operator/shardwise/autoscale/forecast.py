"""A short-horizon forecast of a deployment's request rate: Holt's linear trend, robust to bursts,
plus a daily profile learned from the deployment's own days.

Why Holt (double exponential smoothing) and not a seasonal model alone or a regression: the
horizon that matters is one replica start (a minute or a few), over which a day's shape is a
straight line, so level + trend carries nearly all of it; Holt updates in O(1) from one number per
period, keeps three floats of state (so it survives a restart in a ConfigMap), and follows a
changing slope, where a least-squares or Theil-Sen line over a fixed window lags by half that
window. `bench/bench_autoscale.py` measures the choice: the mean absolute error one start time
ahead of the naive "same as now", of Theil-Sen over the last start time, and of this, on every
trace. Holt-Winters proper (a multiplicative seasonal term updated every period) needs a day of
history before it helps and mixes the day's shape into the level; instead the daily profile is
kept apart (24 hourly means over the last week) and consulted beside the trend, the higher of the
two views winning, once a whole day has been seen.

Bursts: a window whose rate lies more than `_OUTLIER` deviations above the forecast made for it
is a burst. It moves the level only by that many deviations (Huber's clipping) and neither the
trend nor the deviation, so a burst that is over within a period is not read as a trend; the
scale of a deviation is the mean absolute one-step error, never below the Poisson noise of
counting `rate x period` arrivals. Outlying windows that last a whole start time are no burst but
a new level (a step), which the forecast then takes at once. Every constant is a time or a count with a meaning:
- the level averages over one replica start time `startup_s` (a change faster than that cannot be
  met by a new replica anyway), the trend over two (it is the derivative of a noisy level);
- `_OUTLIER` = 3 deviations: the usual outlier fence (about 3 sigma for a normal error);
- the profile has hourly bins and averages each over the last `_PROFILE_DAYS` = 7 days.
"""

from __future__ import annotations

import dataclasses
import math

_OUTLIER = 3.0
# Mean absolute deviation of a normal error is sigma x sqrt(2/pi); 1.25 x MAD is about sigma.
_MAD_TO_SIGMA = 1.25
_DAY_S = 86_400.0
_BINS = 24
_PROFILE_DAYS = 7


@dataclasses.dataclass(frozen=True)
class Forecast:
    """Holt state (rate in req/s, trend in req/s per second) and the daily profile.

    `profile` holds the mean rate of each hour of the day (UTC), `days` how many days each bin
    has averaged (0: not seen). `at` is when the state was last updated.
    """

    level: float
    trend: float = 0.0
    deviation: float = 0.0
    at: float = 0.0
    profile: tuple[float, ...] = (0.0,) * _BINS
    days: tuple[int, ...] = (0,) * _BINS
    bin_sum: float = 0.0
    bin_count: int = 0
    bin_index: int = -1
    # When the current run of burst windows began; None outside a burst.
    burst_since: float | None = None

    def predict(self, now: float, horizon_s: float) -> float:
        """The rate expected `horizon_s` after `now` (never negative)."""
        ahead = max(0.0, horizon_s) + max(0.0, now - self.at)
        trend = self.level + self.trend * ahead
        seasonal = self._profile_delta(self.at, self.at + ahead)
        if seasonal is not None:
            trend = max(trend, self.level + seasonal)
        return max(0.0, trend)

    def peak(self, now: float, horizon_s: float, step_s: float) -> float:
        """The highest rate expected from now to `horizon_s` ahead, sampled every `step_s`."""
        steps = max(1, math.ceil(max(0.0, horizon_s) / max(step_s, 1e-9)))
        return max(self.predict(now, horizon_s * i / steps) for i in range(steps + 1))

    def sigma(self) -> float:
        return _MAD_TO_SIGMA * self.deviation

    @property
    def in_burst(self) -> bool:
        """Whether the latest period was part of a burst not yet long enough to be a new level."""
        return self.burst_since is not None

    def fence(self, period_s: float) -> float:
        """How far above the forecast one period's rate may lie and still not be a burst."""
        return _OUTLIER * self._scale(period_s)

    def level_fence(self, period_s: float, startup_s: float) -> float:
        """How far the smoothed level (and so a prediction) may stray from the true rate on noise
        alone: the same 3-deviation fence, for an exponential average over `startup_s` of periods
        whose rate has that deviation, which shrinks it by sqrt(alpha / (2 - alpha))."""
        alpha = 1 - math.exp(-period_s / max(startup_s, period_s))
        return self.fence(period_s) * math.sqrt(alpha / (2 - alpha))

    def _scale(self, period_s: float) -> float:
        poisson = math.sqrt(max(self.level, 0.0) / max(period_s, 1e-9))
        return max(self.sigma(), poisson, 1e-9)

    def _profile_delta(self, start: float, end: float) -> float | None:
        first, last = _profile_at(self, start), _profile_at(self, end)
        if first is None or last is None:
            return None
        return last - first


def _profile_at(forecast: Forecast, t: float) -> float | None:
    """The profile's rate at time of day `t`, linear between hour centres; None if unseen."""
    position = (t % _DAY_S) / 3_600.0 - 0.5
    low = math.floor(position)
    frac = position - low
    a, b = low % _BINS, (low + 1) % _BINS
    if not forecast.days[a] or not forecast.days[b]:
        return None
    return forecast.profile[a] * (1 - frac) + forecast.profile[b] * frac


def start(rate: float, now: float) -> Forecast:
    """A forecast that has seen one period at `rate`."""
    return Forecast(level=max(0.0, rate), at=now, bin_index=int((now % _DAY_S) // 3_600),
                    bin_sum=max(0.0, rate), bin_count=1)


def update(forecast: Forecast | None, rate: float, now: float, *, startup_s: float) -> Forecast:
    """Fold the rate of the period ending at `now` into the forecast (see the module docstring)."""
    rate = max(0.0, rate)
    if forecast is None or not now > forecast.at:
        return forecast if forecast is not None else start(rate, now)
    dt = now - forecast.at
    tau_level = max(startup_s, dt)
    alpha = 1 - math.exp(-dt / tau_level)
    beta = 1 - math.exp(-dt / (2 * tau_level))
    predicted = forecast.level + forecast.trend * dt
    error = rate - predicted
    fence = _OUTLIER * forecast._scale(dt)
    burst_since = None
    if error > fence:
        burst_since = forecast.burst_since if forecast.burst_since is not None else forecast.at
    profiled = _fold_profile(forecast, rate, now)
    if burst_since is not None and now - burst_since >= startup_s:
        # Outlying for a whole start time: no burst but a new level, which a replica can meet.
        return dataclasses.replace(profiled, level=rate, at=now, burst_since=None)
    if burst_since is not None:
        # Huber: a burst moves the level by the fence at most, and neither the trend nor the
        # deviation, so bursts do not widen the fence that tells them apart.
        level = max(0.0, predicted + alpha * fence)
        return dataclasses.replace(profiled, level=level, at=now, burst_since=burst_since)
    level = max(0.0, predicted + alpha * error)
    trend = (1 - beta) * forecast.trend + beta * (level - forecast.level) / dt
    deviation = (1 - alpha) * forecast.deviation + alpha * abs(error)
    return dataclasses.replace(profiled, level=level, trend=trend, deviation=deviation, at=now,
                               burst_since=None)


def _fold_profile(forecast: Forecast, rate: float, now: float) -> Forecast:
    """Accumulate the hour's mean; when the hour of day changes, fold it into its bin."""
    index = int((now % _DAY_S) // 3_600)
    if index == forecast.bin_index or forecast.bin_index < 0:
        return dataclasses.replace(forecast, bin_index=index, bin_sum=forecast.bin_sum + rate,
                                   bin_count=forecast.bin_count + 1)
    profile, days = list(forecast.profile), list(forecast.days)
    if forecast.bin_count:
        i = forecast.bin_index
        mean = forecast.bin_sum / forecast.bin_count
        n = min(days[i] + 1, _PROFILE_DAYS)
        profile[i] = profile[i] + (mean - profile[i]) / n
        days[i] = min(days[i] + 1, _PROFILE_DAYS)
    return dataclasses.replace(forecast, profile=tuple(profile), days=tuple(days), bin_index=index,
                               bin_sum=rate, bin_count=1)


def to_dict(forecast: Forecast) -> dict[str, object]:
    """The persistent form, rounded so that noise below a visible change does not rewrite it."""
    return {"level": _round(forecast.level), "trend": _round(forecast.trend),
            "deviation": _round(forecast.deviation), "at": round(forecast.at, 1),
            "profile": [_round(p) for p in forecast.profile], "days": list(forecast.days),
            **({"burstSince": round(forecast.burst_since, 1)} if forecast.burst_since is not None else {})}


def from_dict(data: object) -> Forecast | None:
    """The forecast stored by `to_dict`; None for anything unreadable."""
    if not isinstance(data, dict):
        return None
    try:
        profile = tuple(float(p) for p in data.get("profile") or ())
        days = tuple(int(d) for d in data.get("days") or ())
        if len(profile) != _BINS or len(days) != _BINS:
            profile, days = (0.0,) * _BINS, (0,) * _BINS
        values = [float(data["level"]), float(data.get("trend", 0.0)), float(data.get("deviation", 0.0)),
                  float(data["at"])]
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in values + list(profile)):
        return None
    level, trend, deviation, at = values
    since = data.get("burstSince")
    return Forecast(burst_since=float(since) if isinstance(since, (int, float)) else None,
                    level=max(0.0, level), trend=trend, deviation=max(0.0, deviation), at=at,
                    profile=profile, days=days)


def _round(value: float) -> float:
    """Three significant figures."""
    return float(f"{value:.3g}")
