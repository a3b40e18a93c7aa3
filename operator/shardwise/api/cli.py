"""`shardwise crds`: write (or check) the generated CRD YAML."""

from __future__ import annotations

import argparse
import pathlib
import sys

from shardwise.api import crd

DEFAULT_PATH = pathlib.Path("crds/inferencedeployments.shardwise.io.yaml")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("crds", help="write the InferenceDeployment CRD generated from the API models")
    p.add_argument("-o", "--output", type=pathlib.Path, default=DEFAULT_PATH, help="file to write ('-' for stdout)")
    p.add_argument("--check", action="store_true", help="exit 1 if the file differs from the models")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    text = crd.render_crd_yaml()
    if str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run `make crds`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0
