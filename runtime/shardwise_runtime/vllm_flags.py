"""The set of command-line flags `vllm serve` accepts, and a check against it.

Why: vLLM rejects an unknown flag only when the pod starts on a GPU node, minutes after the
operator rendered it. The launcher and the operator's renderer check every flag they emit against
the flags of the vLLM version shardwise targets (0.32), read from that version's own
`vllm serve --help=all`, so a misspelt or removed flag fails a unit test instead.

`data/vllm-serve-flags.json` is derived from tests/fixtures/vllm-0.32-cpu/serve-help-all.txt by
`parse_help_flags`; a unit test keeps the two equal. Regenerate it with
`python -m shardwise_runtime.vllm_flags < serve-help-all.txt > .../data/vllm-serve-flags.json`.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterable
from importlib import resources

# An option line in argparse help starts with two spaces and a dash; the option strings end
# where the description column (two or more spaces) begins.
_OPTION_LINE = re.compile(r"^  (-[^\s].*?)(?:\s{2,}|$)")
# Option strings are the comma-separated items that start with a dash; metavars such as
# `['mp', 'ray']` or `{a,b}` never do.
_OPTION_STRING = re.compile(r"(?:^|,\s)(--?[A-Za-z0-9][\w-]*)")
_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def parse_help_flags(help_text: str) -> frozenset[str]:
    """Every option string (`--tensor-parallel-size`, `-tp`, `--no-enable-log-requests`, ...)."""
    flags: set[str] = set()
    for line in help_text.splitlines():
        match = _OPTION_LINE.match(line)
        if match:
            flags.update(_OPTION_STRING.findall(match.group(1)))
    return frozenset(flags)


@functools.cache
def known_serve_flags() -> frozenset[str]:
    """The flags of `vllm serve` in the vLLM version shardwise targets."""
    text = resources.files("shardwise_runtime").joinpath("data/vllm-serve-flags.json").read_text()
    return frozenset(json.loads(text)["flags"])


def flag_name(token: str) -> str:
    """The option a command-line token names: `--a.b=1` and `--a.b+` name `--a`."""
    name = token.split("=", 1)[0]
    # vLLM accepts JSON-valued options key by key (`--compilation-config.level 3`,
    # `--json-arg.key4+ value`): the flag is the part before the first dot.
    return name.split(".", 1)[0].rstrip("+")


def unknown_flags(argv: Iterable[str], known: frozenset[str] | None = None) -> list[str]:
    """Tokens of `argv` (the arguments after `vllm serve`) that name no known flag, in order.

    Values are not checked: a token is a flag when it starts with a dash and is not a number
    (`--seed -1`); everything after a bare `--` is positional.
    """
    flags = known_serve_flags() if known is None else known
    unknown = []
    for token in argv:
        if token == "--":
            break
        if token.startswith("-") and token != "-" and not _NUMBER.match(token):
            if flag_name(token) not in flags:
                unknown.append(token)
    return unknown


def main() -> None:
    """Write the flag list for a help text on stdin (how data/vllm-serve-flags.json is made)."""
    flags = sorted(parse_help_flags(sys.stdin.read()))
    json.dump({"source": "vllm 0.32.0 `vllm serve --help=all`", "flags": flags}, sys.stdout,
              indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
