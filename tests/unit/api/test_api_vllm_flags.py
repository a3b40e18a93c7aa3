"""The packaged vLLM flag list is vLLM 0.32's own help text, parsed, with each flag's value kind."""

import json
from importlib import resources
from pathlib import Path

import pytest

from shardwise.api import vllm_flags

ROOT = Path(__file__).resolve().parents[3]
HELP = ROOT / "tests/fixtures/vllm-0.32-cpu/serve-help-all.txt"


def test_packaged_flags_are_the_help_text_parsed() -> None:
    packaged = json.loads(resources.files("shardwise.api").joinpath("vllm_flags.json").read_text())
    assert packaged == vllm_flags.document(HELP.read_text()), (
        "operator/shardwise/api/vllm_flags.json is stale: run "
        "`.venv/bin/python -m shardwise.api.vllm_flags < tests/fixtures/vllm-0.32-cpu/serve-help-all.txt`")


def test_same_spellings_as_the_runtime_flag_list() -> None:
    # The launcher's list (shardwise_runtime.vllm_flags) is parsed from the same help by other code.
    runtime = json.loads((ROOT / "runtime/shardwise_runtime/data/vllm-serve-flags.json").read_text())["flags"]
    assert set(vllm_flags.parse_help(HELP.read_text())) == set(runtime)


@pytest.mark.parametrize("flag, canonical, value", [
    ("--max-num-batched-tokens", "--max-num-batched-tokens", "one"),
    ("--enable-prefix-caching", "--enable-prefix-caching", "none"),
    ("--no-enable-prefix-caching", "--enable-prefix-caching", "none"),
    ("-tp", "--tensor-parallel-size", "one"),
    ("-dp", "--data-parallel-size", "one"),
    ("-dpm", "--data-parallel-multi-port-external-lb", "none"),
    ("--device-memory-utilization", "--gpu-memory-utilization", "one"),
    ("--lora-modules", "--lora-modules", "many"),
    ("--hf-token", "--hf-token", "optional"),
    ("--config-format", "--config-format", "one"),  # a ['auto', 'hf', ...] choice list
    ("--tool-call-parser", "--tool-call-parser", "one"),  # {a,b} or name registered in ...
    ("-h", "--help", "none"),
    ("-O", "--optimization-level", "one"),  # vLLM's shorthand, from SHORTHANDS
])
def test_value_kinds_and_aliases(flag: str, canonical: str, value: str) -> None:
    assert vllm_flags.known()[flag] == {"canonical": canonical, "value": value}


def test_parse_help_on_a_small_help() -> None:
    text = ("options:\n"
            "  -h, --help            show this help message and exit\n"
            "  --backend ['mp', 'ray']\n"
            "                        Use --not-a-flag here. (default: None)\n"
            "  --size SIZE, -s SIZE  Size.\n"
            "  --on, --no-on         A switch.\n"
            "  --names NAMES [NAMES ...]\n"
            "  --token [TOKEN]       Optional value.\n")
    assert vllm_flags.parse_help(text) == {
        "--backend": {"canonical": "--backend", "value": "one"},
        "--help": {"canonical": "--help", "value": "none"}, "-h": {"canonical": "--help", "value": "none"},
        "--names": {"canonical": "--names", "value": "many"},
        "--no-on": {"canonical": "--on", "value": "none"}, "--on": {"canonical": "--on", "value": "none"},
        "--size": {"canonical": "--size", "value": "one"}, "-s": {"canonical": "--size", "value": "one"},
        "--token": {"canonical": "--token", "value": "optional"},
    }
