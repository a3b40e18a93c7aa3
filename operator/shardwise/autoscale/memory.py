"""History in a stored form a new leader can read back, and when it is worth writing (pure).

The records are stored run-length encoded: one run per stretch of evaluations that decided the
same (recommendation, desired replicas, pressure, starting), so a steady deployment's stored form
does not change from one period to the next. Read back, each run is expanded into one record per
evaluation period, which is what the stabilization windows and the "window watched without a gap"
rule read: a new leader sees the window the old one waited as waited, and the recommendations it
held as held.

The stored form ends at `evaluatedAt`, the last evaluation the writer confirmed. A writer
refreshes it at most every `HEARTBEAT_S`; on reading, the evaluations are taken to have continued
to the moment of reading only when the store is at most that old (plus the gap an evaluation
timer may drift), so an operator that was down for longer waits a window again, as it must: no
one watched the load meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shardwise.autoscale import history as history_mod
from shardwise.autoscale import learned as learned_mod

# How stale a stored history may be and still continue: one default scale-down window. The
# writer refreshes `evaluatedAt` this often at steady state (one write per 5 minutes per store).
HEARTBEAT_S = 300.0
# A learned figure that moved less than this is not worth a write.
_MATERIAL = 0.1


def to_dict(history: history_mod.History, period_s: float) -> dict[str, Any]:
    """The stored form of `history` (see the module docstring)."""
    runs: list[list[Any]] = []
    for r in history.records:
        key = [r.recommendation, r.desired_replicas, r.pressure, bool(r.starting)]
        if not runs or runs[-1][1:] != key:
            runs.append([round(r.at, 1), *key])
    out: dict[str, Any] = {"periodSeconds": period_s, "runs": runs,
                           "learned": learned_mod.to_dict(history.learned)}
    if history.records:
        out["evaluatedAt"] = round(history.records[-1].at, 1)
    return out


def from_dict(data: Any, now: float) -> history_mod.History:
    """The History stored by `to_dict`, as of `now`; empty records when too old or unreadable."""
    if not isinstance(data, Mapping):
        return history_mod.History()
    learned = learned_mod.from_dict(data.get("learned"))
    try:
        period = float(data["periodSeconds"])
        evaluated = float(data["evaluatedAt"])
        runs = [(float(at), int(rec), int(des), None if p is None else str(p), bool(st))
                for at, rec, des, p, st in data.get("runs") or ()]
    except (KeyError, TypeError, ValueError):
        return history_mod.History(learned=learned)
    if not (period > 0 and math.isfinite(period) and math.isfinite(evaluated)):
        return history_mod.History(learned=learned)
    # An old store says what was learned, not what the recent windows held.
    if now - evaluated > HEARTBEAT_S + 2.5 * period or evaluated > now:
        return history_mod.History(learned=learned)
    records: list[history_mod.Record] = []
    ends = [at for at, *_ in runs[1:]] + [max(evaluated, now - period)]
    for (at, rec, des, pressure, starting), end in zip(runs, ends):
        t = at
        while t < end - 1e-6 or (t == at and t <= end):
            records.append(history_mod.Record(t, rec, des, pressure, starting))
            t += period
    return history_mod.History(tuple(r for r in records if r.at < now), learned)


def material_change(stored: Mapping[str, Any] | None, current: Mapping[str, Any], now: float) -> bool:
    """Whether `current` should be written over `stored`: a new run of decisions, a learned figure
    moved by more than 10 %, or the stored confirmation is a heartbeat old."""
    if stored is None:
        return True
    if _runs_key(stored) != _runs_key(current):
        return True
    if now - float(stored.get("evaluatedAt") or 0.0) >= HEARTBEAT_S:
        return True
    old, new = stored.get("learned") or {}, current.get("learned") or {}
    if old.get("idleSince") != new.get("idleSince"):
        return True
    if _moved(old.get("startupSeconds"), new.get("startupSeconds")):
        return True
    old_safe = learned_mod.from_dict(old).safe_rps
    new_learned = learned_mod.from_dict(new)
    if _moved(old_safe, new_learned.safe_rps):
        return True
    old_f, new_f = old.get("forecast") or {}, new.get("forecast") or {}
    if old_f.get("days") != new_f.get("days"):
        return True
    return _moved(old_f.get("level"), new_f.get("level"), floor=1.0)


def _runs_key(data: Mapping[str, Any]) -> list[Any]:
    # The runs that still matter: their values, not the times of the newest.
    return [run[1:] for run in data.get("runs") or ()][-8:]


def _moved(old: Any, new: Any, floor: float = 0.0) -> bool:
    if old is None or new is None:
        return old is not new
    a, b = float(old), float(new)
    return abs(a - b) > _MATERIAL * max(abs(a), abs(b), floor)
