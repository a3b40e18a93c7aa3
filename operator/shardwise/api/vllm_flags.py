"""The flags of `vllm serve` in the vLLM version shardwise targets (0.32), and what each expects.

Why here, in the API package: spec.serving.extraArgs is checked against these flags at admission
(CEL generated into the CRD) and by the models themselves (`shardwise plan`, the operator), so a
misspelt flag is refused at `kubectl apply` instead of crash-looping a pod minutes later.

`vllm_flags.json` beside this module is `parse_help` of vLLM 0.32's own `vllm serve --help=all`
(tests/fixtures/vllm-0.32-cpu/serve-help-all.txt); a unit test fails when the two differ.
Regenerate it with
`.venv/bin/python -m shardwise.api.vllm_flags < tests/fixtures/vllm-0.32-cpu/serve-help-all.txt`.

Each flag maps to {"canonical": the first long spelling of its option, "value": how many values
it takes}: "none" (a switch such as --enable-prefix-caching and its --no- form), "one" (a metavar
or a choice list), "optional" (`[X]`: argparse nargs='?') or "many" (`X [X ...]`: nargs='+').
"""

from __future__ import annotations

import functools
import json
import re
import sys
from importlib import resources
from typing import Any

# An option line in argparse help starts with two spaces and a dash; the option strings end where
# the description column (two or more spaces) begins.
_OPTION_LINE = re.compile(r"^  (-[^\s].*?)(?:\s{2,}|$)")
# One option string and its metavar, up to the next option string (`, -x`); a choice list such as
# `['auto', 'hf']` holds `, '` and so never starts a new one.
_OPTION = re.compile(r"(--?[A-Za-z0-9][\w-]*)(.*?)(?=, --?[A-Za-z0-9]|$)")

# Spellings vLLM's own FlexibleArgumentParser rewrites before argparse sees them, which the help
# text only mentions in prose ("-O0 having the best startup time and -O3 ..."): `-O3` and `-O 3`
# are --optimization-level; `-O.mode=3` is a key of --compilation-config.
SHORTHANDS = {"-O": {"canonical": "--optimization-level", "value": "one"}}

VALUE_KINDS = ("none", "one", "optional", "many")


def _value_kind(metavar: str) -> str:
    metavar = metavar.strip()
    if not metavar:
        return "none"
    if metavar.startswith("[") and metavar.endswith("]") and not metavar.startswith("['"):
        return "optional"
    if metavar.endswith("...]"):
        return "many"
    return "one"


def parse_help(help_text: str) -> dict[str, dict[str, str]]:
    """Every option string of an argparse help text, with its canonical spelling and value kind."""
    flags: dict[str, dict[str, str]] = {}
    for line in help_text.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        options = _OPTION.findall(match.group(1))
        if not options:
            continue
        longs = [name for name, _ in options if name.startswith("--")]
        canonical = longs[0] if longs else options[0][0]
        kind = _value_kind(options[0][1])
        for name, _ in options:
            # A --no- spelling is the switch turned off: it never takes a value.
            flags[name] = {"canonical": canonical, "value": "none" if name.startswith("--no-") else kind}
    return dict(sorted(flags.items()))


@functools.cache
def known() -> dict[str, dict[str, str]]:
    """Every spelling `vllm serve` 0.32 accepts (help text plus SHORTHANDS) -> canonical, value kind."""
    text = resources.files("shardwise.api").joinpath("vllm_flags.json").read_text()
    return {**json.loads(text)["flags"], **SHORTHANDS}


def spellings_of(canonical: str) -> list[str]:
    """Every spelling of one option: `--tensor-parallel-size` -> [-tp, --tensor-parallel-size]."""
    return sorted(name for name, info in known().items() if info["canonical"] == canonical)


def document(help_text: str) -> dict[str, Any]:
    return {"source": "vllm 0.32.0 `vllm serve --help=all` (tests/fixtures/vllm-0.32-cpu/serve-help-all.txt)",
            "flags": parse_help(help_text)}


def main() -> None:
    """Write vllm_flags.json for the help text on stdin."""
    path = resources.files("shardwise.api").joinpath("vllm_flags.json")
    text = json.dumps(document(sys.stdin.read()), indent=1) + "\n"
    with resources.as_file(path) as target:
        target.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
