"""`shardwise metrics summarize` errors: one line on stderr, nothing on stdout, exit 1."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from shardwise.observe import cli


def _run(capsys: pytest.CaptureFixture[str], before: pathlib.Path, after: pathlib.Path) -> str:
    code = cli.main(["metrics", "summarize", "--before", str(before), "--after", str(after)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.endswith("\n")
    return err


def test_missing_file(capsys: pytest.CaptureFixture[str], captures: pathlib.Path) -> None:
    err = _run(capsys, captures / "nope.txt", captures / "metrics-t1.txt")
    assert "cannot read" in err and "nope.txt" in err


def test_not_prometheus_text(capsys: pytest.CaptureFixture[str], captures: pathlib.Path) -> None:
    err = _run(capsys, captures / "chat.json", captures / "metrics-t1.txt")
    assert "chat.json" in err and "not Prometheus text" in err


def test_not_vllm_metrics(
    capsys: pytest.CaptureFixture[str], captures: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    other = tmp_path / "node-exporter.txt"
    other.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    err = _run(capsys, captures / "metrics-t0.txt", other)
    assert "no vLLM series" in err


def test_counters_going_backwards(
    capsys: pytest.CaptureFixture[str], captures: pathlib.Path
) -> None:
    err = _run(capsys, captures / "metrics-t1.txt", captures / "metrics-t0.txt")
    assert "went backwards" in err


def test_register_adds_exactly_the_contract() -> None:
    root = argparse.ArgumentParser(prog="shardwise")
    cli.register(root.add_subparsers(dest="command"))
    args = root.parse_args(["metrics", "summarize", "--before", "a", "--after", "b", "-o", "json"])
    assert (args.before, args.after, args.output) == ("a", "b", "json")
    assert args.func is cli.run_summarize
    with pytest.raises(SystemExit):
        root.parse_args(["metrics", "summarize", "--before", "a", "--after", "b", "-o", "yaml"])
