"""The planner out of sample: leave-one-publisher-out on the published measurements.

A regression floor, not issue 23's target: the shares below are today's held-out figures (bench/
bench_planner_accuracy.py, docs/planner-calibration.md) less a small margin, so a change to the
model or its constants that makes held-out predictions worse fails here. The issue's targets on
vLLM figures (within 2x: ITL 85 %, tokens/s 85 %, TTFT 70 %) are printed by the bench; tokens/s
is not there yet (80 %).
"""

from __future__ import annotations

import functools

import pytest

from shardwise.planner import calibrate

# (engine family, metric) -> floor on the held-out share within 2x (measured: 93 %, 80 %, 100 %,
# 95 %, 84 %).
FLOORS = {("vllm", "itlMs"): 0.90, ("vllm", "tokensPerSecond"): 0.76, ("vllm", "ttftMs"): 0.90,
          ("all", "itlMs"): 0.90, ("all", "tokensPerSecond"): 0.80}


@functools.cache
def _folds() -> tuple[calibrate.Fold, ...]:
    return tuple(calibrate.cross_validate())


@pytest.mark.parametrize(("family", "metric"), sorted(FLOORS))
def test_held_out_share_within_2x_stays_above_its_floor(family: str, metric: str) -> None:
    held = calibrate.scores(calibrate.held_out_errors(_folds()))[(family, metric)]
    assert held.within_2 >= FLOORS[(family, metric)], held


def test_every_publisher_is_held_out_and_predicted_by_a_fit_that_never_saw_it() -> None:
    folds = _folds()
    assert len({f.group for f in folds}) == len(folds) >= 5
    for fold in folds:
        assert fold.errors and all(e.case.source in fold.sources for e in fold.errors)


def test_held_out_layout_orderings_all_agree() -> None:
    orderings = [o for f in _folds() for o in f.orderings]
    assert orderings and all(o.agrees for o in orderings)
