"""`shardwise metrics summarize`: what one vLLM server did between two saved scrapes.

An offline contract other tools depend on: one JSON object on stdout, or one line on stderr
and exit status 1. The figures are those the operator writes to the status, unrounded except
for float noise, computed by the same parse/delta/quantile code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from shardwise.observe import aggregate, parse


class _Failure(Exception):
    """A user-facing error: its message is the one line printed."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `metrics summarize` to the `shardwise` command line."""
    metrics = subparsers.add_parser("metrics", help="work with vLLM /metrics scrapes")
    sub = metrics.add_subparsers(dest="metrics_command", required=True)
    summarize = sub.add_parser(
        "summarize", help="latency and token counts between two scrapes of one vLLM server"
    )
    summarize.add_argument("--before", required=True, metavar="BEFORE.txt")
    summarize.add_argument("--after", required=True, metavar="AFTER.txt")
    summarize.add_argument("-o", "--output", choices=["json"], default="json")
    summarize.set_defaults(func=run_summarize)


def _read(path: str) -> parse.Sample:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as error:
        raise _Failure(f"cannot read {path}: {error.strerror or error}") from None
    try:
        return parse.parse(text)
    except parse.MetricsError as error:
        raise _Failure(f"{path}: {error}") from None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize_files(before_path: str, after_path: str) -> dict[str, Any]:
    """The contract's JSON object for two scrape files; raises _Failure with the message."""
    before, after = _read(before_path), _read(after_path)
    d = aggregate.delta(before, after)
    if d.reset is not None:
        raise _Failure(f"{after_path} is not a later scrape of the same server: {d.reset}")
    s = aggregate.summarize([d], window_seconds=0.0, gauges=[after.gauges])
    return {
        "requests": round(s.requests),
        "promptTokens": round(s.prompt_tokens),
        "outputTokens": round(s.output_tokens),
        "ttftP50Ms": _ms(s.ttft_p50_ms),
        "ttftP95Ms": _ms(s.ttft_p95_ms),
        "ttftP99Ms": _ms(s.ttft_p99_ms),
        "itlP50Ms": _ms(s.itl_p50_ms),
        "itlP95Ms": _ms(s.itl_p95_ms),
        "e2eP95Ms": _ms(s.e2e_p95_ms),
        "queueP95Ms": _ms(s.queue_p95_ms),
    }


def run_summarize(args: argparse.Namespace) -> int:
    try:
        result = summarize_files(args.before, args.after)
    except _Failure as failure:
        print(f"shardwise metrics summarize: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `metrics ...` as the `shardwise` command would (argv without the program name)."""
    root = argparse.ArgumentParser(prog="shardwise")
    register(root.add_subparsers(dest="command", required=True))
    args = root.parse_args(argv)
    return int(args.func(args))
