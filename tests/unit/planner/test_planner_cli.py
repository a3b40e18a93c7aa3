"""`shardwise plan` contract: JSON is Plan.to_dict(); exit 0 feasible, 2 infeasible, 1 bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from shardwise import planner
from shardwise.planner import cli
from shardwise_runtime.sim.hub_thread import HubThread

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEPLOYMENTS = FIXTURES / "deployments"
NODES = FIXTURES / "nodes"
TOP_KEYS = {
    "weights",
    "engine",
    "feasible",
    "tensorParallel",
    "pipelineParallel",
    "dataParallel",
    "expertParallel",
    "layout",
    "gpusPerReplica",
    "nodesPerReplica",
    "gpusPerNode",
    "gpuProduct",
    "interconnect",
    "reason",
    "reasonCode",
    "schedulableNow",
    "capacityMessage",
    "predicted",
    "memory",
    "alternatives",
}
PREDICTED_KEYS = {
    "itlMs",
    "ttftMs",
    "tokensPerSecond",
    "hourlyUSD",
    "perMillionOutputTokensUSD",
    "priceSource",
    "expectedError",
    "idleItlMs",
}


@pytest.fixture(autouse=True)
def empty_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A local hub with no repositories as HF_ENDPOINT: a model the catalog lacks is looked up
    there (and refused, 404) instead of on the internet; subprocesses inherit it."""
    (tmp_path / "hub").mkdir()
    with HubThread(tmp_path / "hub") as local:
        monkeypatch.setenv("HF_ENDPOINT", local.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield local.url


def _plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = cli.main(["plan", *argv, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("deployment", "nodes", "code", "tp", "pp"),
    [
        ("llama-3.1-70b", "h100-nvswitch-2x8", 0, 8, 1),
        ("llama-3.1-70b", "l40s-pcie-2x4", 0, 4, 2),
        ("llama-3.1-70b", "a100-pcie-nvlink-pairs", 0, 2, 2),
        ("llama-3.1-405b", "h100-nvswitch-2x8", 0, 8, 2),
        ("llama-3.1-405b", "gb200-clique", 0, 8, 1),
        ("deepseek-r1-fp8", "h100-nvswitch-2x8", 0, 8, 2),
        ("llama-3.1-70b-awq-cost", "mixed", 0, 2, 1),
        ("llama-3.1-405b-l40s", "mixed", 2, None, None),
        ("qwen-7b-tp8", "mixed", 2, None, None),
    ],
)
def test_fixture_plans(
    capsys: pytest.CaptureFixture[str],
    deployment: str,
    nodes: str,
    code: int,
    tp: int | None,
    pp: int | None,
) -> None:
    status, result = _plan_json(
        capsys,
        "-f",
        str(DEPLOYMENTS / f"{deployment}.yaml"),
        "--nodes",
        str(NODES / f"{nodes}.yaml"),
    )
    assert status == code
    assert set(result) == TOP_KEYS
    assert result["feasible"] is (code == 0)
    assert (result["tensorParallel"], result["pipelineParallel"]) == (tp, pp)
    if result["predicted"]:
        assert set(result["predicted"]) == PREDICTED_KEYS
    for alternative in result["alternatives"]:
        assert set(alternative) == TOP_KEYS - {"alternatives", "weights"} | {"rejectedBecause"}


def test_json_is_exactly_to_dict(capsys: pytest.CaptureFixture[str]) -> None:
    deployment, nodes = DEPLOYMENTS / "llama-3.1-8b.yaml", NODES / "mixed.yaml"
    _, printed = _plan_json(capsys, "-f", str(deployment), "--nodes", str(nodes))
    spec = yaml.safe_load(deployment.read_text())["spec"]
    items = yaml.safe_load(nodes.read_text())["items"]
    expected = planner.plan(
        planner.request_from_spec(spec), planner.inventory_from_nodes(items)
    ).to_dict()
    assert printed == expected


def test_pods_in_the_nodes_file_count_as_busy(capsys: pytest.CaptureFixture[str]) -> None:
    status, result = _plan_json(
        capsys,
        "-f",
        str(DEPLOYMENTS / "llama-3.1-70b.yaml"),
        "--nodes",
        str(NODES / "h100-busy.yaml"),
    )
    assert status == 0 and result["schedulableNow"] is False
    assert "fits when 4 more are freed" in result["capacityMessage"]


def test_bad_input_is_one_line_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "plan",
            "-f",
            str(DEPLOYMENTS / "unknown-model.yaml"),
            "--nodes",
            str(NODES / "mixed.yaml"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "spec.model.architecture" in err
    assert "ModelNotFound" in err and "Repository Not Found" in err  # the hub's own answer


def test_missing_file_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(
        ["plan", "-f", str(tmp_path / "absent.yaml"), "--nodes", str(NODES / "mixed.yaml")]
    )
    assert code == 1 and "-f: cannot read" in capsys.readouterr().err


def test_cluster_price_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("NVIDIA-H100-80GB-HBM3: 4.0\n")
    code = cli.main(
        [
            "plan",
            "-f",
            str(DEPLOYMENTS / "llama-3.1-70b.yaml"),
            "--nodes",
            str(NODES / "h100-nvswitch-2x8.yaml"),
            "--prices",
            str(prices),
            "-o",
            "json",
        ]
    )
    predicted = json.loads(capsys.readouterr().out)["predicted"]
    assert code == 0 and predicted["priceSource"] == "cluster" and predicted["hourlyUSD"] == 32.0


def test_table_output_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "plan",
            "-f",
            str(DEPLOYMENTS / "llama-3.1-70b.yaml"),
            "--nodes",
            str(NODES / "l40s-pcie-2x4.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "TP4 x PP2" in out and "ALTERNATIVES" in out and "REJECTED BECAUSE" in out


def test_subprocess_exit_codes() -> None:
    """The module runs as a program, as `shardwise plan` will, with the same exit statuses."""

    def run(deployment: str) -> int:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "shardwise.planner.cli",
                "plan",
                "-f",
                str(DEPLOYMENTS / f"{deployment}.yaml"),
                "--nodes",
                str(NODES / "mixed.yaml"),
                "-o",
                "json",
            ],
            capture_output=True,
            check=False,
        ).returncode

    assert [run("llama-3.1-8b"), run("unknown-model"), run("llama-3.1-405b-l40s")] == [0, 1, 2]


def test_workload_flags_move_the_predictions_and_the_table_states_the_error_band(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["-f", str(DEPLOYMENTS / "llama-3.1-70b.yaml"), "--nodes", str(NODES / "h100-nvswitch-2x8.yaml")]
    _, default = _plan_json(capsys, *args)
    _, short = _plan_json(capsys, *args, "--prompt-tokens", "128", "--concurrency", "1")
    _, busy = _plan_json(capsys, *args, "--prompt-tokens", "4096", "--concurrency", "64")
    assert short["predicted"]["ttftMs"] < default["predicted"]["ttftMs"] < busy["predicted"]["ttftMs"]
    assert short["predicted"]["itlMs"] < busy["predicted"]["itlMs"]
    band = default["predicted"]["expectedError"]
    assert band["gpuFamily"] == "hopper" and band["itlMs"]["typicalFactor"] >= 1.0
    assert cli.main(["plan", *args]) == 0
    assert "ERROR BAND   TTFT x" in capsys.readouterr().out
