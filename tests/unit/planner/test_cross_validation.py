"""The planner out of sample: leave-one-publisher-out on the published measurements.

A regression floor at issue 23's targets or above: the shares below are today's held-out figures
(bench/bench_planner_accuracy.py, docs/planner-calibration.md) less a small margin, and never below
the issue's targets on vLLM figures (within 2x: ITL 85 %, tokens/s 85 %, TTFT 70 %), so a change
to the model or its constants that makes held-out predictions worse fails here. The held-out error
bands `shardwise plan` prints (error_bands.yaml) must be this cross-validation's.
"""

from __future__ import annotations

import functools

import pytest
import yaml

from shardwise.planner import calibrate, calibrate_cli, efficiency

# (engine family, metric) -> floor on the held-out share within 2x (measured: vLLM ITL 100 % of 43,
# tokens/s 92 % of 49, TTFT 100 % of 11; all engines ITL 100 % of 65, tokens/s 91 % of 97,
# TTFT 100 % of 20).
FLOORS = {("vllm", "itlMs"): 0.95, ("vllm", "tokensPerSecond"): 0.88, ("vllm", "ttftMs"): 0.90,
          ("all", "itlMs"): 0.95, ("all", "tokensPerSecond"): 0.88, ("all", "ttftMs"): 0.90}
ISSUE_TARGETS = {("vllm", "itlMs"): 0.85, ("vllm", "tokensPerSecond"): 0.85, ("vllm", "ttftMs"): 0.70}
# Sources added for issue 38 (EP/DP and three engines on DeepSeek-R1): their figures are held out
# like every other's but scored on their own floors below, so the floors above keep guarding the
# figures they were set on (today on those: vLLM ITL 100 % of 46, tokens/s 94 % of 52, TTFT 92 %
# of 13; all engines ITL 100 % of 68, tokens/s 93 % of 100, TTFT 95 % of 22).
ISSUE_38_SOURCES = {"gpustack-deepseek-r1-h200", "vllm-recipe-deepseek-r1-h200"}
# EP/DP figures (a layout with DP or EP) held out, within 2x: today ITL 5 of 6, tokens/s 3 of 7
# (issue 38's target is 80 % for both: tokens/s is not met, docs/planner-calibration.md says why).
EP_FLOORS = {"itlMs": 0.8, "tokensPerSecond": 0.4}


@functools.cache
def _folds() -> tuple[calibrate.Fold, ...]:
    return tuple(calibrate.cross_validate())


@pytest.mark.parametrize(("family", "metric"), sorted(FLOORS))
def test_held_out_share_within_2x_stays_above_its_floor(family: str, metric: str) -> None:
    errs = [e for e in calibrate.held_out_errors(_folds()) if e.case.source not in ISSUE_38_SOURCES]
    held = calibrate.scores(errs)[(family, metric)]
    assert held.within_2 >= FLOORS[(family, metric)], held


def test_every_publisher_is_held_out_and_predicted_by_a_fit_that_never_saw_it() -> None:
    folds = _folds()
    assert len({f.group for f in folds}) == len(folds) >= 5
    for fold in folds:
        assert fold.errors and all(e.case.source in fold.sources for e in fold.errors)


@pytest.mark.parametrize("metric", sorted(EP_FLOORS))
def test_held_out_ep_and_dp_figures_stay_above_their_floor(metric: str) -> None:
    errs = [e for e in calibrate.held_out_errors(_folds())
            if e.metric == metric and (e.case.dp > 1 or e.case.ep)]
    held = calibrate.score(errs)
    assert held is not None and held.figures >= 6 and held.within_2 >= EP_FLOORS[metric], held


def test_held_out_tp_against_dp_orderings_come_out_as_published() -> None:
    """TP against DP/EP on one model and GPU, held out with their publisher: SGLang's DP attention
    against TP8 on DeepSeek-R1 (GPUStack: more tokens/s, shorter ITL in a burst) and vLLM's recipe
    (TP8+EP better at one stream, DP8+EP at 1,024)."""
    layout = [o for f in _folds() for o in f.orderings if "DP8" in o.what]
    assert len(layout) >= 5 and all(o.agrees for o in layout), layout


def test_cross_validation_by_engine_release_holds_out_one_release_at_a_time() -> None:
    folds = calibrate.cross_validate(by="release", rounds=1)
    releases = {calibrate.release(c) for c in calibrate.cases()}
    assert {f.group for f in folds} == releases
    for fold in folds:
        assert fold.errors and all(calibrate.release(e.case) == fold.group for e in fold.errors)


def test_held_out_layout_orderings_all_agree() -> None:
    orderings = [o for f in _folds() for o in f.orderings]
    assert orderings and all(o.agrees for o in orderings)


def test_floors_are_at_least_the_issue_targets() -> None:
    assert all(FLOORS[key] >= target for key, target in ISSUE_TARGETS.items())


def test_error_bands_yaml_is_the_committed_cross_validation() -> None:
    """error_bands.yaml (the ERROR BAND of `shardwise plan`) must be what cross-validating the
    committed model and data gives; after a change, `python -m shardwise.planner.calibrate_cli
    bands` rewrites it."""
    path = calibrate_cli._path("error_bands.yaml")
    with open(path, encoding="utf-8") as handle:
        committed = yaml.safe_load(handle)
    assert calibrate_cli.same_bands(committed, calibrate_cli.bands_body(list(_folds()))), (
        "error_bands.yaml is stale: run `python -m shardwise.planner.calibrate_cli bands`")


def test_a_changed_band_is_stale() -> None:
    body = calibrate_cli.bands_body(list(_folds()))
    assert calibrate_cli.same_bands(body, body)
    changed = yaml.safe_load(yaml.safe_dump(body))
    changed["bands"]["vllm"]["all"]["tokensPerSecond"]["medianLog2"] += 0.01
    assert not calibrate_cli.same_bands(body, changed)
    changed = yaml.safe_load(yaml.safe_dump(body))
    changed["bands"]["vllm"]["all"]["tokensPerSecond"]["cases"] += 1
    assert not calibrate_cli.same_bands(body, changed)


def test_plans_quote_the_held_out_vllm_band_not_the_fit() -> None:
    held = efficiency.held_out()
    errs = [e for e in calibrate.held_out_errors(_folds())
            if e.case.engine_family == "vllm" and e.case.family == "hopper" and e.metric == "itlMs"]
    band = held.band("vllm", "hopper", "itlMs")
    assert band is not None and band.cases == len(errs)
    assert band.median_log2 == pytest.approx(calibrate.band(errs)[0], abs=0.002)
