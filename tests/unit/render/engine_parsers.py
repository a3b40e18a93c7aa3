"""Parsers standing in for the engines' own, built from the pinned copies of their flags.

SGLang 0.5.23: an argparse parser rebuilt from its captured `launch_server --help`
(tests/fixtures/sglang-0.5.23/serve-help.txt): every option with its spellings, how many values it
takes and its choices (`{a,b}`), with argparse's defaults as SGLang's parser has them (prefixes
allowed). So an unknown flag, a missing value or a value outside the choices fails here as it would
there. The types and cross-field rules of SGLang's `ServerArgs` are not in the help; the few that
shardwise's flags touch are checked by `sglang_problems` (sizes are integers, `--tp-size` divisible
by `--attn-dp-size`, the rank below `--nnodes`), including some SGLang's own parser does not check
(fractions in (0, 1)): the reference README says which it catches.

TensorRT-LLM: `trtllm-serve` is a click command; `trtllm_problems` checks a command line against
the click options of the pinned source (operator/shardwise/api/trtllm_flags.json): exact spellings,
one value each or none for switches, one positional MODEL.

Installing SGLang itself to run its real parser would add ~5 GB (its own torch) to a cold
`make test`; docs/engines.md says what that leaves unproven.
"""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path
from typing import Any

from shardwise.api import engine_flags

SGLANG_HELP = Path(__file__).parents[2] / "fixtures" / "sglang-0.5.23" / "serve-help.txt"
_OPTION_LINE = re.compile(r"^  (-[^\s].*?)(?:\s{2,}|$)")
_OPTION = re.compile(r"(--?[A-Za-z0-9][\w-]*)(.*?)(?=, --?[A-Za-z0-9]|$)")

# ServerArgs types of the flags shardwise renders (python/sglang/srt/server_args.py field types).
SGLANG_INT = ("--tp-size", "--pp-size", "--attn-dp-size", "--ep-size", "--port", "--context-length",
              "--max-running-requests", "--nnodes", "--node-rank")
SGLANG_FLOAT = ("--mem-fraction-static",)


@functools.cache
def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    seen: set[str] = set()
    for line in SGLANG_HELP.read_text().splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        options = _OPTION.findall(match.group(1))
        names = [n for n, _ in options if n not in seen]
        if not names:
            continue
        seen.update(names)
        metavar = options[0][1].strip()
        kwargs: dict[str, Any] = {}
        choices = re.fullmatch(r"\{([^}]*)\}", metavar)
        if any(n.startswith("--no-") for n in names):  # `--x | --no-x`: argparse's BooleanOptionalAction
            dest = names[0].lstrip("-").replace("-", "_")
            for n in names:
                parser.add_argument(n, dest=dest, action="store_false" if n.startswith("--no-") else "store_true")
            continue
        if not metavar:
            kwargs["action"] = "store_true"
        elif choices:
            kwargs["choices"] = choices.group(1).split(",")
        elif metavar.endswith("...]"):
            kwargs["nargs"] = "*" if metavar.startswith("[") else "+"
        elif metavar.startswith("[") and metavar.endswith("]"):
            kwargs["nargs"] = "?"
        if names[0] in ("-h", "--help"):
            kwargs = {"action": "store_true"}
        parser.add_argument(*names, **kwargs)
    return parser


def sglang_problems(argv: list[str], *, rank: int = 0, leader: str = "10.0.0.1") -> list[str]:
    """What SGLang 0.5.23 (as captured) would refuse in `argv` (after `launch_server`), with the
    LeaderWorkerSet variables Kubernetes expands put in for pod `rank`."""
    argv = [a.replace("$(LWS_WORKER_INDEX)", str(rank)).replace("$(LWS_LEADER_ADDRESS)", leader) for a in argv]
    try:
        parsed, unknown = sglang_parser().parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        return [str(exc)]
    problems = [f"unknown argument {u}" for u in unknown]
    values = vars(parsed)
    if not values.get("model_path"):
        problems.append("--model-path is required")

    def value(flag: str) -> Any:
        return values.get(flag.lstrip("-").replace("-", "_"))

    for flag in SGLANG_INT:
        if value(flag) is not None and not re.fullmatch(r"-?[0-9]+", str(value(flag))):
            problems.append(f"{flag} {value(flag)!r} is not an integer")
    for flag in SGLANG_FLOAT:
        if value(flag) is not None:
            try:
                fraction = float(value(flag))
                if not 0 < fraction < 1:
                    problems.append(f"{flag} {fraction} is not in (0, 1)")
            except ValueError:
                problems.append(f"{flag} {value(flag)!r} is not a number")
    if problems:
        return problems
    tp, attn_dp = int(value("--tp-size") or 1), value("--attn-dp-size")
    if tp < 1 or int(value("--pp-size") or 1) < 1:
        problems.append("parallel sizes must be at least 1")
    if attn_dp is not None and (int(attn_dp) < 1 or tp % int(attn_dp)):
        problems.append(f"--tp-size {tp} is not divisible by --attn-dp-size {attn_dp}")
    if value("--ep-size") is not None and int(value("--ep-size")) > tp:
        problems.append("--ep-size is larger than --tp-size")
    nnodes = int(value("--nnodes") or 1)
    if nnodes > 1 and (value("--dist-init-addr") is None or not 0 <= int(value("--node-rank")) < nnodes):
        problems.append("a multi-node launch needs --dist-init-addr and a --node-rank below --nnodes")
    return problems


def trtllm_problems(argv: list[str]) -> list[str]:
    """What `trtllm-serve` (the pinned click options) would refuse in `argv` (after trtllm-serve)."""
    flags = engine_flags.trtllm()
    problems, positional, index = [], [], 0
    while index < len(argv):
        item = argv[index]
        if item.startswith("--"):
            name = item.split("=")[0]
            if name not in flags:
                problems.append(f"No such option: {name}")
            elif flags[name]["value"] == "none":
                if "=" in item:
                    problems.append(f"Option {name} does not take a value")
            elif "=" not in item:
                if index + 1 >= len(argv):
                    problems.append(f"Option {name} requires an argument")
                index += 1
        else:
            positional.append(item)
        index += 1
    if len(positional) != 1:
        problems.append(f"expected one MODEL argument, got {positional}")
    return problems


def trtllm_key_problems(options: dict[str, Any], keys: dict[str, Any] | None = None, where: str = "") -> list[str]:
    """LLM API options keys the pinned copy does not list."""
    keys = engine_flags.trtllm_llm_api_keys() if keys is None else keys
    problems = []
    for key, value in options.items():
        if key not in keys:
            problems.append(f"unknown LLM API key {where}{key}")
        elif isinstance(value, dict):
            problems += trtllm_key_problems(value, keys[key], f"{where}{key}.")
    return problems
