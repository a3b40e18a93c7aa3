"""`make bench-gateway`: what a gateway adds in front of vLLM engines, side by side, in one run.

The same simulated engines (bench/gateway_engines.py: 4 shardwise sim engines with flat TTFT and
inter-token latency, one process of their own) and the same load (bench/gateway_load.py: N
concurrent streaming chat completions from a client process of its own) go through each
contender in turn (bench/gateway_contenders.py): direct to the engines (the baseline), Envoy
alone (the floor), vLLM's Rust router, the LiteLLM proxy if it installs, and shardwise's gateway
(Envoy + its ext_proc service, fed by a local API server), and the same again with API keys and
quotas on (a real Redis as the quota store). Each is warmed up first, then measured:

- TTFT and the gap between content chunks, p50 and p99, and what each adds over the direct run
  (the difference of the percentiles: gateway_figures.py says why);
- errors (a contender failing more than 1 % of requests fails the bench), requests per second;
- the contender's own CPU (utime + stime of all its processes, from /proc, before and after the
  measured run) per 1,000 requests.

A final direct run shows how far the machine drifted meanwhile: on a busy machine added
latencies smaller than that drift are noise. Prints the machine first, a table, one JSON line per
contender, then issue 20's targets for shardwise's gateway. Nothing is asserted beyond the error
rate. This file is not named bench_*.py: `make bench` does not run it (it needs the `bench`
extra, which `make bench-gateway` installs).

    python bench/gateway.py [--requests 3000] [--concurrency 256] [--no-litellm]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import secrets
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gateway_contenders as contenders  # noqa: E402
import gateway_figures as figures  # noqa: E402

MAX_ERROR_RATE = 0.01
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def describe_machine() -> str:
    cpu_model = "unknown CPU"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    load = os.getloadavg()
    return (
        f"machine: {contenders.cpu_count()} cores ({cpu_model}), {mem_gib:.1f} GiB memory, "
        f"Linux {platform.release()}, Python {platform.python_version()}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
    )


def read_stats() -> dict[int, str]:
    """pid -> /proc/<pid>/stat line, for every process readable now."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # exited between listdir and read
    return stats


class Engines:
    """The engines process: started once, shared by every contender."""

    def __init__(self, count: int, ttft_ms: float, itl_ms: float, workdir: pathlib.Path) -> None:
        self.log = workdir / "engines.log"
        # Loopback IPs of their own, on port 8000 like pods (shardwise's gateway routes to pod
        # IP:8000). The second octet is drawn above the local clusters' pod ranges (127.20-219.x)
        # so a `make demo` or e2e run beside this one keeps its addresses.
        octet = secrets.choice(range(220, 251))
        hosts = ",".join(f"127.{octet}.0.{i + 1}" for i in range(count))
        argv = [sys.executable, str(HERE / "gateway_engines.py"), "--hosts", hosts,
                "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)]
        with self.log.open("wb") as log:
            self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()  # blocks until they listen, or EOF if they died
        if not line:
            raise SystemExit(f"the engines did not start:\n{self.log.read_text()[-2000:]}")
        self.addresses: list[str] = json.loads(line)["addresses"]

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def run_load(contender: contenders.Contender, requests: int, args: argparse.Namespace,
             out: pathlib.Path) -> dict:
    argv = [sys.executable, str(HERE / "gateway_load.py"), "--requests", str(requests),
            "--concurrency", str(args.concurrency), "--tokens", str(args.tokens),
            "--time-limit", str(args.time_limit), "--out", str(out)]
    if not args.no_ramp:  # the streams spread over one stream's duration (gateway_load.py says why)
        argv += ["--ramp", str((args.ttft_ms + args.tokens * args.itl_ms) / 1000)]
    for url in contender.base_urls:
        argv += ["--base-url", url]
    if contender.api_key:
        argv += ["--api-key", contender.api_key]
    try:
        subprocess.run(argv, check=True, timeout=args.time_limit + 120)
    except subprocess.TimeoutExpired as error:
        # Each request has its own timeout; a client still running past that hung on a contender.
        raise contenders.Unavailable(f"the load did not finish within {error.timeout:.0f} s") from error
    return json.loads(out.read_text())


@dataclasses.dataclass
class Pooled:
    """One contender's raw results over the rounds, pooled: percentiles come from every sample."""

    ttft_s: list[float] = dataclasses.field(default_factory=list)
    gaps_s: list[float] = dataclasses.field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    cpu_s: float | None = None
    examples: list[str] = dataclasses.field(default_factory=list)

    def add(self, result: dict, cpu_s: float | None) -> None:
        self.ttft_s += result["ttft_s"]
        self.gaps_s += result["gaps_s"]
        self.errors += result["errors"]
        self.wall_s += result["wall_s"]
        self.examples += result["error_examples"][:3]
        if cpu_s is not None:
            self.cpu_s = (self.cpu_s or 0.0) + cpu_s

    def figures(self, name: str, baseline: tuple | None) -> figures.Figures:
        return figures.figures_of(name, ttft_s=self.ttft_s, gaps_s=self.gaps_s, errors=self.errors,
                                  wall_s=self.wall_s, cpu_s=self.cpu_s, baseline=baseline)


def measure(contender: contenders.Contender, engines: Engines, args: argparse.Namespace,
            workdir: pathlib.Path) -> tuple[dict, float | None, dict[str, float]]:
    """Start, warm up, measure and stop one contender: its load result, CPU, and figures of its own."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        contender.start(engines.addresses, workdir)
        pids = contender.pids  # stop() forgets them
        # Warm-up: connections opened, caches and JITs (LiteLLM's Python) warm, the same
        # concurrency as the measured run.
        run_load(contender, args.warmup, args, workdir / f"{contender.name}-warmup.json")
        before = figures.tree_cpu_ticks(pids, read_stats())
        result = run_load(contender, args.requests, args,
                          workdir / f"{contender.name}.json")
        stats = read_stats()
        after = figures.tree_cpu_ticks(pids, stats)
        if not contender.alive():
            raise contenders.Unavailable(f"{contender.name} died during the run")
        own = contender.after_run(
            lambda n: run_load(contender, n, args, workdir / f"{contender.name}-after.json"))
    finally:
        contender.stop()
    if not result["ttft_s"]:
        raise contenders.Unavailable(
            f"{contender.name}: no request succeeded ({result['errors']} errors: "
            f"{result['error_examples'][:2]})")
    cpu = None if not pids else figures.cpu_seconds_between(before, after, CLOCK_TICKS)
    if cpu is not None:
        split = figures.cpu_seconds_by_command(before, after, stats, CLOCK_TICKS)
        print("  CPU-s by process: " + ", ".join(
            f"{name} {seconds:.2f}" for name, seconds in sorted(split.items(), key=lambda kv: -kv[1])))
    return result, cpu, own


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="measured requests per contender")
    parser.add_argument("--concurrency", type=int, default=256, help="concurrent streams")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up requests per contender (default: 2 x concurrency)")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens (chunks) per request")
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="the engines' TTFT")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="the engines' inter-token latency")
    parser.add_argument("--time-limit", type=float, default=180.0,
                        help="seconds per load run after which no request starts")
    parser.add_argument("--envoy-concurrency", type=int, default=contenders.cpu_count(),
                        help="Envoy worker threads (default: the cores, as Envoy's own default)")
    parser.add_argument("--no-ramp", action="store_true",
                        help="start every stream at once (waves of --concurrency arrivals)")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM proxy")
    parser.add_argument("--litellm-install-timeout", type=float, default=600.0)
    parser.add_argument("--litellm-start-timeout", type=float, default=180.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every contender this many times, in turn, and pool the samples (a busy "
                             "machine drifts: rounds spread the drift over every contender alike)")
    parser.add_argument("--only", nargs="+", default=None,
                        help="run only these contenders (the direct baseline always runs)")
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = 2 * args.concurrency
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(describe_machine())
    print(f"load: {args.requests} streaming chat completions per contender, {args.concurrency} "
          f"concurrent, {args.tokens} tokens each, after {args.warmup} warm-up requests; "
          f"{args.engines} simulated engines (TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms) "
          f"in one process; client in another", flush=True)
    field = contenders.all_contenders(
        envoy_concurrency=args.envoy_concurrency, litellm=not args.no_litellm,
        litellm_install_timeout_s=args.litellm_install_timeout,
        litellm_start_timeout_s=args.litellm_start_timeout)
    if args.only:
        field = [c for c in field if c.role == "baseline" or c.name in args.only]
    rows: list[figures.Figures] = []
    roles: dict[str, str] = {}
    own: dict[str, dict[str, float]] = {}
    skipped: dict[str, str] = {}
    pooled: dict[str, Pooled] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        workdir = pathlib.Path(tmp)
        engines = Engines(args.engines, args.ttft_ms, args.itl_ms, workdir)
        try:
            final = contenders.Direct()
            final.name = "direct (again)"  # how far the machine drifted over the run
            for round_ in range(args.rounds):
                last = round_ == args.rounds - 1
                for contender in [*field, *([final] if last else [])]:
                    if contender.name in skipped:
                        continue
                    print(f"== {contender.name}" + (f" (round {round_ + 1} of {args.rounds})" if args.rounds > 1 else ""),
                          flush=True)
                    started = time.monotonic()
                    try:
                        result, cpu, own[contender.name] = measure(
                            contender, engines, args, workdir / f"round-{round_}" / contender.name)
                    except contenders.Unavailable as why:
                        print(f"  skipped: {why}")
                        skipped[contender.name] = str(why).splitlines()[0]
                        continue
                    pooled.setdefault(contender.name, Pooled()).add(result, cpu)
                    roles[contender.name] = contender.role
                    ok = len(result["ttft_s"])
                    print(f"  {ok} ok, {result['errors']} errors, {ok / result['wall_s']:.0f} req/s, "
                          f"{time.monotonic() - started:.0f} s", flush=True)
        finally:
            engines.stop()
    baseline = None
    for name, results in pooled.items():
        row = results.figures(name, baseline)
        if baseline is None:  # the first is the direct run, every round's pooled
            baseline = (row.ttft, row.gap)
        if results.examples:
            print(f"  {name} errors, e.g.: {results.examples[:3]}")
        rows.append(row)
    print()
    print("Milliseconds; + = added over direct (difference of percentiles); gap = between "
          "content chunks; CPU = the contender's processes only")
    print(figures.format_table(rows))
    for row in rows:
        print(json.dumps(row.as_json()))
    for name, why in skipped.items():
        print(f"not measured: {name}: {why}")
    drift = [r for r in rows if r.name == "direct (again)"]
    if drift:
        print(f"baseline drift over the run (direct again - direct): TTFT p99 "
              f"{drift[0].added_ttft.p99 * 1000:+.2f} ms, chunk gap p99 "
              f"{drift[0].added_gap.p99 * 1000:+.2f} ms")
    candidate = next((r for r in rows if roles[r.name] == "candidate"), None)
    floor = next((r for r in rows if roles[r.name] == "floor"), None)
    # A peer that failed more than 1 % of requests has no latency worth beating: its survivors
    # are the requests it got to, and its chunks come in bursts after the wait.
    peers = [r for r in rows if roles[r.name] == "peer" and r.error_rate <= MAX_ERROR_RATE]
    print("targets (issue 20), for shardwise's gateway:")
    if candidate is None:
        print("  not evaluated: shardwise gateway: not available yet")
    else:
        for line in figures.target_lines(candidate, floor, peers):
            print(f"  {line}")
    keyed = next((r for r in rows if roles[r.name] == "keys"), None)
    if keyed is not None and candidate is not None:
        print("keys and quotas on (issue 21), the same gateway with `--auth` and a Redis quota store:")
        redis = own.get(keyed.name, {}).get("redis_commands_per_request")
        for line in figures.key_check_lines(keyed, candidate, redis):
            print(f"  {line}")
    fast_keyed = next((r for r in rows if roles[r.name] == "keys-fast"), None)
    if fast_keyed is not None and candidate is not None:
        print("a key without limits (issue 41: Envoy admits it, the keyed fast path):")
        redis = own.get(fast_keyed.name, {}).get("redis_commands_per_request")
        for line in figures.key_check_lines(fast_keyed, candidate, redis):
            print(f"  {line}")
    failed = [r for r in rows if r.error_rate > MAX_ERROR_RATE]
    for row in failed:
        print(f"FAILED: {row.name} errored on {row.error_rate:.1%} of requests "
              f"(more than {MAX_ERROR_RATE:.0%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
