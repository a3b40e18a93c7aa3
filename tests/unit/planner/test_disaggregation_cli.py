"""`shardwise plan-pd` on the shipped example (llm-d's P/D guide shape) and H200 nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardwise import cli

ROOT = Path(__file__).resolve().parents[3]
ARGS = ["plan-pd", "-f", str(ROOT / "examples/disaggregation/gpt-oss-120b-pd.yaml"),
        "--nodes", str(ROOT / "tests/fixtures/nodes/h200-nvswitch-2x8.yaml"),
        "--model-config", str(ROOT / "tests/fixtures/hub-configs/openai/gpt-oss-120b")]


def test_the_example_needs_the_pair_and_gets_llm_ds_split(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*ARGS, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "Disaggregated", out["reason"]
    pair = out["disaggregated"]
    assert (pair["prefill"]["replicas"], pair["prefill"]["tensorParallel"]) == (8, 1)
    assert (pair["decode"]["replicas"], pair["decode"]["tensorParallel"]) == (2, 4)
    assert pair["meetsSLO"] and not out["aggregated"]["meetsSLO"]
    assert pair["handoff"]["link"] == "nvlink"


def test_a_ttft_target_alone_keeps_it_aggregated(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = (ROOT / "examples/disaggregation/gpt-oss-120b-pd.yaml").read_text().replace("slo: {itlP95: 15ms}", "slo: {}")
    spec = spec.replace("slo: {ttftP95: 2s}", "slo: {ttftP95: 800ms}")
    path = tmp_path / "ttft.yaml"
    path.write_text(spec)
    assert cli.main(["plan-pd", "-f", str(path), *ARGS[3:]]) == 0
    assert capsys.readouterr().out.startswith("Aggregated: the aggregated layout meets every declared SLO")


def test_no_rate_is_a_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "norate.yaml"
    path.write_text((ROOT / "examples/disaggregation/gpt-oss-120b-pd.yaml").read_text().replace("    requestsPerSecond: 45\n", ""))
    assert cli.main(["plan-pd", "-f", str(path), *ARGS[3:]]) == 1
    assert "give --rate or spec.workload.requestsPerSecond" in capsys.readouterr().err
