"""`shardwise`: one command line for the operator and its offline tools.

Each subcommand lives beside the code it drives (planner/cli.py, observe/cli.py, ...) and
registers itself here, so this module stays a table of contents.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that expose `register(subparsers)`; imported lazily so `shardwise crds` does not pay
# for the Kubernetes client and `shardwise plan` works without a cluster.
_SUBCOMMAND_MODULES = (
    "shardwise.controller.cli",
    "shardwise.api.cli",
    "shardwise.planner.cli",
    "shardwise.planner.disaggregation_cli",
    "shardwise.observe.cli",
    "shardwise.gateway.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwise", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = getattr(args, "handler", None) or args.func
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
