"""`shardwise crds`: write (or check) the generated CRD YAML."""

from __future__ import annotations

import argparse
import pathlib
import sys

from shardwise.api import crd

DEFAULT_PATH = pathlib.Path("crds/inferencedeployments.shardwise.io.yaml")
# The Helm chart carries a byte-identical copy (a chart cannot reach outside its folder).
CHART_COPY = pathlib.Path("charts/shardwise/files/inferencedeployments.shardwise.io.yaml")
# The gateway's APIKey CRD, written beside it (and into the chart) whenever the default is.
APIKEY_PATH = pathlib.Path("crds/apikeys.shardwise.io.yaml")
APIKEY_CHART_COPY = pathlib.Path("charts/shardwise/files/apikeys.shardwise.io.yaml")
# The gateway's Provider CRD (hosted APIs behind the gateway), likewise.
PROVIDER_PATH = pathlib.Path("crds/providers.shardwise.io.yaml")
PROVIDER_CHART_COPY = pathlib.Path("charts/shardwise/files/providers.shardwise.io.yaml")


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
    targets = [(args.output, text)]
    if args.output == DEFAULT_PATH:
        apikey = crd.render_apikey_crd_yaml()
        provider = crd.render_provider_crd_yaml()
        targets += [(CHART_COPY, text), (APIKEY_PATH, apikey), (APIKEY_CHART_COPY, apikey),
                    (PROVIDER_PATH, provider), (PROVIDER_CHART_COPY, provider)]
    if args.check:
        stale = [str(t) for t, want in targets if not t.exists() or t.read_text() != want]
        if stale:
            print(f"{', '.join(stale)} stale: run `make crds`", file=sys.stderr)
        return 1 if stale else 0
    for target, want in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(want)
        print(f"wrote {target}")
    return 0
