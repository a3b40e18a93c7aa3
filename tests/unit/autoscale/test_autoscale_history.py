"""History: immutable recording, pruning to what later decisions need, and the status round trip."""

from __future__ import annotations

import dataclasses

from shardwise.autoscale import History, Record


@dataclasses.dataclass(frozen=True)
class Recorded:
    recommendation: int = 3
    desired_replicas: int = 3
    pressure: str | None = "ttft"
    history_window_s: float = 100.0
    starting: bool = False
    waiting: float = 2.0


def test_record_returns_a_new_history_and_drops_what_no_window_needs() -> None:
    old = History((Record(0.0, 1, 1), Record(150.0, 2, 2)))
    new = old.record(Recorded(), 200.0)
    assert old.records == (Record(0.0, 1, 1), Record(150.0, 2, 2))
    assert new.records == (Record(150.0, 2, 2), Record(200.0, 3, 3, "ttft", False, 2.0))


def test_observed_since_needs_the_start_covered_and_no_gaps() -> None:
    every_30s = History(tuple(Record(float(t), 1, 1) for t in range(0, 300, 30)))
    assert every_30s.observed_since(0.0, 300.0, max_gap_s=75.0)
    assert not every_30s.observed_since(-30.0, 300.0, max_gap_s=75.0)
    assert not every_30s.observed_since(0.0, 400.0, max_gap_s=75.0)
    holed = History(tuple(r for r in every_30s.records if r.at != 120.0 and r.at != 150.0))
    assert not holed.observed_since(0.0, 300.0, max_gap_s=75.0)


def test_consecutive_counts_the_same_pressure_back_to_a_change_or_gap() -> None:
    history = History((Record(0.0, 1, 1, "ttft"), Record(30.0, 1, 1, "itl"),
                       Record(60.0, 1, 1, "ttft"), Record(90.0, 1, 1, "ttft")))
    assert history.consecutive("ttft", 120.0, max_gap_s=75.0) == 2
    assert history.consecutive("itl", 120.0, max_gap_s=75.0) == 0
    assert history.consecutive("ttft", 200.0, max_gap_s=75.0) == 0


def test_last_startup_spans_the_starting_run() -> None:
    history = History((Record(0.0, 2, 2), Record(30.0, 4, 4, starting=True),
                       Record(60.0, 4, 4, starting=True), Record(90.0, 4, 4, starting=True),
                       Record(120.0, 4, 4), Record(150.0, 4, 4)))
    assert history.last_startup_s(160.0) == 90.0
    assert history.last_startup_s(100.0) is None
    assert History().last_startup_s(0.0) is None


def test_latest_ignores_a_stale_record() -> None:
    history = History((Record(0.0, 1, 1), Record(30.0, 2, 2)))
    assert history.latest(60.0, max_gap_s=75.0) == Record(30.0, 2, 2)
    assert history.latest(30.0, max_gap_s=75.0) == Record(0.0, 1, 1)
    assert history.latest(200.0, max_gap_s=75.0) is None
