"""The vLLM flag list: derived faithfully from the help text, and the check that uses it."""

import json
from importlib import resources
from pathlib import Path

import pytest

from shardwise_runtime import vllm_flags

HELP = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu" / "serve-help-all.txt"


def test_packaged_flag_list_is_the_help_text_parsed() -> None:
    packaged = json.loads(resources.files("shardwise_runtime").joinpath(
        "data/vllm-serve-flags.json").read_text())["flags"]
    assert packaged == sorted(vllm_flags.parse_help_flags(HELP.read_text()))


def test_parser_reads_aliases_negations_and_bracketed_metavars() -> None:
    flags = vllm_flags.known_serve_flags()
    for flag in ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
                 "--device-memory-utilization", "--no-enable-log-requests", "-ep",
                 "--distributed-executor-backend", "--nnodes", "-n", "--node-rank",
                 "--master-addr", "--headless", "--served-model-name"):
        assert flag in flags
    # A choices list such as ['external_launcher', 'mp', ...] must not become flags.
    assert not any("'" in f or "mp" == f.lstrip("-") for f in flags)


def test_parse_help_flags_on_a_small_help() -> None:
    text = ("options:\n"
            "  -h, --help            show this help message and exit\n"
            "  --backend ['mp', 'ray']\n"
            "                        Use --not-a-flag here. (default: None)\n"
            "  --size SIZE, -s SIZE  Size.\n")
    assert vllm_flags.parse_help_flags(text) == {"-h", "--help", "--backend", "--size", "-s"}


@pytest.mark.parametrize("argv, unknown", [
    (["--max-model-len", "8192", "-tp", "4"], []),
    (["--max-model-len=8192", "--no-enable-log-requests"], []),
    (["--compilation-config.level", "3", "--eplb-config.window_size+", "1"], []),
    (["--seed", "-1", "--gpu-memory-utilization", "-0.5"], []),
    (["--max-model-length", "8192", "--tp", "4"], ["--max-model-length", "--tp"]),
    (["--", "--whatever"], []),
])
def test_unknown_flags(argv: list[str], unknown: list[str]) -> None:
    assert vllm_flags.unknown_flags(argv) == unknown
