"""What one collection cycle costs the operator at 500 serving pods: CPU ms per cycle.

A cycle = parse every pod's /metrics text + add it to the sliding window + summarise the fleet.
The network is left out (it is wait, not CPU); texts are the real vLLM 0.32 capture
(tests/fixtures/vllm-0.32-cpu/metrics-t1.txt) with every vLLM value scaled per pod and cycle so
no two pods or cycles are alike and counters keep rising. Also measured, for the record: the
same parse without parse.py's line pre-filter (prometheus_client over the whole text), which is
why the pre-filter exists.

Run: .venv/bin/python bench/bench_collector.py [--pods 500] [--cycles 5]
"""

from __future__ import annotations

import argparse
import pathlib
import time

from prometheus_client import parser

from shardwise.observe import aggregate, parse

CAPTURE = pathlib.Path(__file__).parents[1] / "tests/fixtures/vllm-0.32-cpu/metrics-t1.txt"


def _varied(text: str, factor: float) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith("vllm:") and "_created" not in line:
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) * factor!r}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--cycles", type=int, default=5)
    args = ap.parse_args()
    base = CAPTURE.read_text()
    cycles = [
        [_varied(base, (1 + c) * (1 + (p % 17) / 10)) for p in range(args.pods)]
        for c in range(args.cycles)
    ]
    window = aggregate.Window(window_seconds=300)
    parse_ms, total_ms = [], []
    for c, texts in enumerate(cycles):
        start = time.process_time()
        samples = [parse.parse(t) for t in texts]
        parsed = time.process_time()
        for p, s in enumerate(samples):
            window.add(f"pod-{p}", s, t=15.0 * c)
        summary = window.summary(now=15.0 * c)
        end = time.process_time()
        parse_ms.append((parsed - start) * 1000)
        total_ms.append((end - start) * 1000)
    assert summary.pods == args.pods and summary.ttft_p95_ms is not None

    full_n = max(1, args.pods // 10)  # the unfiltered parse is slow: time a tenth, scale up
    start = time.process_time()
    for t in cycles[0][:full_n]:
        for _ in parser.text_string_to_metric_families(t):
            pass
    full_ms = (time.process_time() - start) * 1000 * args.pods / full_n

    steady = total_ms[1:] or total_ms  # the first cycle only sets baselines
    print(f"pods: {args.pods}, cycles: {args.cycles}, text: {len(base)} bytes/pod")
    print(f"cycle CPU ms (parse + window + summary): median {sorted(steady)[len(steady) // 2]:.0f}"
          f", max {max(steady):.0f}")
    print(f"  of which parse: median {sorted(parse_ms)[len(parse_ms) // 2]:.0f} ms"
          f" ({sorted(parse_ms)[len(parse_ms) // 2] / args.pods:.2f} ms/pod)")
    print(f"prometheus_client over the whole text, no pre-filter: {full_ms:.0f} ms/cycle"
          f" ({full_ms / args.pods:.2f} ms/pod)")


if __name__ == "__main__":
    main()
