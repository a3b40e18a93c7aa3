"""What spec.serving.extraArgs may hold: vLLM 0.32 `serve` flags and their values, one per item,
none of them a flag shardwise sets itself.

Items go to `vllm serve` as they are, after the planned flags; no shell ever reads them. So each
item is one token: a flag (`--flag` or `--flag=value`) or the value of the flag before it.

Two levels, because of what CEL can afford:
- each item (`ITEM_CHECKS`): flags shardwise owns in any spelling, shell syntax, several tokens in
  one item, `--help`, and flags vLLM 0.32 does not have. These are CEL rules on the item, so the
  API server refuses them (membership in the ~430 spellings costs one list lookup per item).
- the list (`list_problem`): a value with no flag before it that takes one, a flag left without
  its value, a switch given `=value`. That needs each item's neighbours and the value kind of the
  nearest flag before it; CEL rules on a list read items, not neighbours (Kubernetes 1.33's
  two-variable comprehensions could, at a lookup cost not measured yet), so the models check it:
  `shardwise plan` refuses it and the operator reports it as condition Ready=False, reason
  InvalidSpec, before creating anything.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from shardwise.api import checks, vllm_flags

# `vllm serve` options shardwise sets itself (render/vllm_args.py), the data-parallel layout (the
# operator's replicas and the autoscaler are the only source of replicas; vLLM's data-parallel
# ranks would take 4x the GPUs the planner counted), and the multi-node flags shardwise-launch
# adds (runtime launcher/spec.py). Every spelling of each (aliases, --no- forms) is owned too.
OWNED_FLAGS = ("--model", "--dtype", "--quantization", "--host", "--port", "--tensor-parallel-size",
               "--pipeline-parallel-size", "--max-model-len", "--gpu-memory-utilization",
               "--served-model-name", "--max-num-seqs",
               "--data-parallel-size", "--data-parallel-size-local", "--data-parallel-rank",
               "--data-parallel-start-rank", "--data-parallel-address", "--data-parallel-rpc-port",
               "--data-parallel-backend", "--data-parallel-hybrid-lb", "--data-parallel-external-lb",
               "--data-parallel-multi-port-external-lb", "--data-parallel-supervisor-port",
               "--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--headless",
               # spec.lora and spec.adapters: the operator loads and unloads adapters at runtime, and
               # would unload one that --lora-modules put there.
               "--enable-lora", "--max-lora-rank", "--max-loras", "--max-cpu-loras", "--lora-modules")


def _owned_spellings() -> tuple[tuple[str, ...], tuple[str, ...]]:
    spellings = sorted({s for flag in OWNED_FLAGS for s in vllm_flags.spellings_of(flag)})
    return (tuple(s for s in spellings if s.startswith("--")), tuple(s for s in spellings if not s.startswith("--")))


OWNED_LONG, OWNED_SHORT = _owned_spellings()

# A number is a value, never a flag (`--seed -1`).
NUMBER = r"-[0-9.][0-9.eE+-]*"


def flag_of(item: str) -> str:
    """The option an item names, as vLLM's parser reads it: up to the first `=` (the value) and the
    first `.` (a key of a JSON option, `--compilation-config.mode`), `_` read as `-` in a long
    flag; `-O3` and `-O.mode=3` are vLLM's -O shorthand."""
    if item.startswith("-O"):
        return "-O"
    name = item.split("=")[0].split(".")[0]
    return name.replace("_", "-") if name.startswith("--") else name


def is_flag(item: str) -> bool:
    return item.startswith("-") and re.fullmatch(NUMBER, item) is None


# --- owned flags (any spelling) -------------------------------------------------------------
# argparse takes unambiguous prefixes (`--tensor-parallel 4`) and attached short values (`-qawq`),
# so an item is owned when its flag, up to the first `=` or space with `_` read as `-`, is a
# prefix of an owned long spelling, or starts with an owned short one.
_OWNED_OF_ITEM = "self.trim().split(' ')[0].split('=')[0].replace('_', '-')"
_OWNED_CEL = (
    # `[x].all(f, ...)` binds f = x (cel.bind is not in the CRD validation environment).
    f"![{_OWNED_OF_ITEM}].all(f, !(f.startsWith('--') && f.size() > 3 && "
    f"{list(OWNED_LONG)}.exists(o, o.startsWith(f))) && "
    f"!(!f.startsWith('--') && {list(OWNED_SHORT)}.exists(o, f.startsWith(o))))"
)


def is_owned(item: str) -> bool:
    """The CEL rule above, in Python."""
    flag = item.strip().split(" ")[0].split("=")[0].replace("_", "-")
    if flag.startswith("--"):
        return len(flag) > 3 and any(owned.startswith(flag) for owned in OWNED_LONG)
    return any(flag.startswith(owned) for owned in OWNED_SHORT)


OWNED_MESSAGE = (
    "serving.extraArgs may not set a flag shardwise sets itself (--model, --dtype, --quantization/-q, --host, "
    "--port, --tensor-parallel-size/-tp, --pipeline-parallel-size/-pp, --max-model-len, "
    "--gpu-memory-utilization, --served-model-name, --max-num-seqs; the data-parallel flags --data-parallel-*/"
    "-dp*, whose ranks the planner does not count: replicas come from spec.replicas or spec.autoscaling; the "
    "multi-node flags --distributed-executor-backend, --nnodes/-n, --node-rank/-r, --master-addr, --headless; the "
    "LoRA flags --enable-lora, --max-lora-rank, --max-loras, --max-cpu-loras, --lora-modules: spec.lora and "
    "spec.adapters), "
    "in any spelling (=value, a space, underscores, a prefix); use the matching spec fields instead"
)

# --- one token per item -------------------------------------------------------------------
_SHELL = r"&&|\|\||;|\||&|>|>>|<|2>&1|sh|bash|zsh|/bin/sh|/bin/bash|/bin/zsh|-c|\$\(.*\)|`.*`"
_SHELL_MESSAGE = ("is shell syntax, but no shell runs serving.extraArgs: each item is one argument of `vllm "
                  "serve`; keep only vLLM flags and their values")
_SEVERAL_MESSAGE = ("holds several arguments; serving.extraArgs takes one per item: write each flag and each value "
                    "as an item of its own (\"--flag\", \"value\") or as --flag=value")
_LEADING_MESSAGE = ("starts with whitespace, which makes it a value to vLLM, not a flag: remove it "
                    "(serving.extraArgs items are passed as they are)")
_HELP_MESSAGE = "makes vLLM print its help and exit instead of serving: remove it from serving.extraArgs"
# vLLM's argparse also takes an unambiguous prefix (`--enable-prefix-cach`); refused all the same:
# a prefix that is unambiguous in 0.32 fails on the first vLLM that adds a flag sharing it.
_UNKNOWN_MESSAGE = ("is not a flag of vLLM 0.32's `vllm serve` (flags are exact, no abbreviations; the list is "
                    "`vllm serve --help=all`)")


def _quoted(item: str) -> str:
    return f"serving.extraArgs item '{item}'"


def _closest(item: str) -> str:
    near = difflib.get_close_matches(flag_of(item), vllm_flags.known(), n=1)
    return f"; did you mean {near[0]}?" if near else ""


_QUOTED_CEL = "'serving.extraArgs item \\'' + self + '\\' '"
_KNOWN_CEL = (f"!self.startsWith('-') || self.matches({checks.cel_string(checks.anchored(NUMBER))}) || self.startsWith('-O') || "
              "[self.split('=')[0].split('.')[0]].all(n, (n.startsWith('--') ? n.replace('_', '-') : n) in "
              f"{sorted(vllm_flags.known())})")

ITEM_CHECKS = (
    checks.Check(message=OWNED_MESSAGE, predicate=is_owned, predicate_cel=_OWNED_CEL),
    checks.Check(
        bad=rf"^{checks.WHITESPACE}+-", message=f"a serving.extraArgs item {_LEADING_MESSAGE}",
        describe=lambda item: f"{_quoted(item)} {_LEADING_MESSAGE}",
        message_cel=f"{_QUOTED_CEL} + {checks.cel_string(_LEADING_MESSAGE)}",
    ),
    checks.Check(
        bad_whole=_SHELL, message=f"a serving.extraArgs item {_SHELL_MESSAGE}",
        describe=lambda item: f"{_quoted(item)} {_SHELL_MESSAGE}",
        message_cel=f"{_QUOTED_CEL} + {checks.cel_string(_SHELL_MESSAGE)}",
    ),
    checks.Check(
        # A flag whose name (before any `=value`) holds whitespace: several tokens in one item.
        bad=rf"^-[^=]*{checks.WHITESPACE}", message=f"a serving.extraArgs item {_SEVERAL_MESSAGE}",
        # The split list itself would be a better hint, but splitting in a messageExpression costs more
        # than the CRD's budget allows (measured: the API server refuses the CRD).
        describe=lambda item: f"{_quoted(item)} {_SEVERAL_MESSAGE}",
        message_cel=f"{_QUOTED_CEL} + {checks.cel_string(_SEVERAL_MESSAGE)}",
    ),
    checks.Check(
        bad_whole=r"(?:-h|--help)(?:=.*)?", message=f"a serving.extraArgs item {_HELP_MESSAGE}",
        describe=lambda item: f"{_quoted(item)} {_HELP_MESSAGE}",
        message_cel=f"{_QUOTED_CEL} + {checks.cel_string(_HELP_MESSAGE)}",
    ),
    checks.Check(
        message=f"a serving.extraArgs item {_UNKNOWN_MESSAGE}",
        predicate=lambda item: is_flag(item) and flag_of(item) not in vllm_flags.known(),
        predicate_cel=f"!({_KNOWN_CEL})",
        describe=lambda item: f"{_quoted(item)} {_UNKNOWN_MESSAGE}{_closest(item)}",
        message_cel=f"{_QUOTED_CEL} + {checks.cel_string(_UNKNOWN_MESSAGE)}",
    ),
)


def item_problem(item: str) -> str | None:
    """Why one item cannot be in serving.extraArgs (the CRD's CEL rules on an item), or None."""
    return checks.first_problem(ITEM_CHECKS, item)


def _takes(item: str) -> str:
    """How many values follow `item` as separate items: none, one, optional or many."""
    if "=" in item or (item.startswith("-O") and item != "-O"):
        return "none"  # the value is attached (`--flag=value`, `-O3`, `-O.mode=3`)
    if "." in item:
        return "one"  # a key of a JSON option: `--compilation-config.mode 3`
    return vllm_flags.known()[flag_of(item)]["value"]


def _switch_problem(item: str) -> str | None:
    flag = flag_of(item)
    if "=" not in item or "." in item.split("=")[0] or vllm_flags.known()[flag]["value"] != "none":
        return None
    off = f"--no-{flag[2:]}"
    return (f"{flag} is a switch and takes no value: write it alone to turn it on"
            + (f", or {off} to turn it off" if off in vllm_flags.known() else ""))


def list_problem(items: Sequence[str]) -> str | None:
    """Why the list cannot be serving.extraArgs though each item can: a value no flag takes, a flag
    without its value, a switch given a value. Items are assumed to pass `item_problem`."""
    owner: str | None = None  # the flag the next value item belongs to
    wants = "none"  # how many values `owner` takes: one, optional or many
    taken = 0  # values `owner` has taken so far
    for index, item in enumerate(items):
        where = f"serving.extraArgs[{index}] '{item}'"
        if not is_flag(item):
            if owner is None:
                before = f"'{items[index - 1]}' takes no value" if index else "no flag comes before it"
                return (f"{where} is a value, but {before}: put each value right after the flag it belongs to "
                        "(--flag value, or --flag=value)")
            taken += 1
            if wants != "many":
                owner = None
            continue
        if owner is not None and wants in ("one", "many") and taken == 0:
            return f"serving.extraArgs: '{owner}' needs a value: put it in the item right after the flag"
        switch = _switch_problem(item)
        if switch:
            return f"{where}: {switch}"
        wants, taken = _takes(item), 0
        owner = item if wants != "none" else None
    if owner is not None and wants in ("one", "many") and taken == 0:
        return f"serving.extraArgs: '{owner}' needs a value: add it as the next item"
    return None
