"""The performance model against the published measurements in measurements.yaml."""

from __future__ import annotations

import pytest

from shardwise.planner import calibrate, efficiency

TARGET_MEDIAN_LOG2 = 0.4


@pytest.fixture(scope="module")
def cases() -> list[calibrate.Case]:
    return calibrate.cases()


@pytest.mark.parametrize("metric", calibrate.METRICS)
def test_median_error_per_metric_is_within_target(cases: list[calibrate.Case], metric: str) -> None:
    errs = [e for e in calibrate.errors(cases) if e.metric == metric]
    assert len(errs) >= 10, f"too few {metric} measurements to judge the fit"
    median, _ = calibrate.band(errs)
    worst = sorted(errs, key=lambda e: -e.log2)[:3]
    assert median <= TARGET_MEDIAN_LOG2, [(e.case.label, e.predicted, e.measured) for e in worst]


def test_same_source_comparisons_come_out_in_the_measured_order(cases: list[calibrate.Case]) -> None:
    orderings = calibrate.orderings(cases)
    assert len(orderings) >= 20
    wrong = [(o.what, o.metric, o.measured_ratio, o.predicted_ratio) for o in orderings if not o.agrees]
    assert not wrong


def test_every_case_and_source_is_cited() -> None:
    data = calibrate.dataset()
    sources = data["sources"]
    for raw in [*data["cases"], *data["orderings"]]:
        assert raw["source"] in sources
    for source in sources.values():
        assert source["url"].startswith("https://") and source["what"]


# efficiency.yaml is fitted on every source with cases (python -m shardwise.planner.calibrate_cli fit):
# its in-sample bands must be that fit's errors on all of them.
def test_error_bands_in_efficiency_yaml_match_the_data(cases: list[calibrate.Case]) -> None:
    """The fit's own record of its in-sample error: it must be the committed constants' errors."""
    eff = efficiency.fitted()
    errs = calibrate.errors(cases)
    for metric in calibrate.METRICS:
        band = eff.band("all", metric)
        assert band is not None
        median, p90 = calibrate.band([e for e in errs if e.metric == metric])
        assert band.median_log2 == pytest.approx(median, abs=0.002)
        assert band.p90_log2 == pytest.approx(p90, abs=0.002)


def test_error_band_falls_back_to_all_families_without_enough_cases() -> None:
    eff = efficiency.fitted()
    assert eff.band_family("hopper") == "hopper"
    assert eff.band_family("blackwell") == "all"  # no Blackwell case in the data set
    assert eff.band("blackwell", "itlMs") == eff.band("all", "itlMs")
    held = efficiency.held_out()
    assert held.band_family("vllm", "hopper") == "hopper"
    assert held.band_family("vllm", "blackwell") == "all"
    assert held.band("vllm", "blackwell", "itlMs") == held.band("vllm", "all", "itlMs")
    assert held.band("unknown-engine", "hopper", "itlMs") == held.band("all", "hopper", "itlMs")
