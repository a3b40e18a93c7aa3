"""The simulated engines of `make bench-gateway`: N shardwise sim engines in ONE process of their own.

The benchmark measures what a proxy adds, so the engines must take the same time for every
request whatever the load: each engine is shardwise's simulated vLLM (runtime/shardwise_runtime/
sim: vLLM's OpenAI routes, SSE chunks and /metrics) with its latency model made flat. Its
defaults slow every step as the batch grows and scale prefill with the prompt; here the batch
slowdown is 0, prefill is all fixed cost, and the batch is wider than any load the bench sends,
so TTFT and inter-token latency are the configured ones and nothing queues in the engine.

They run apart from the benchmark and the load client so that neither's CPU is billed to a
contender, and all of them in one process so that a 2-core machine still has cores left for the
proxy under test. Prints one JSON line {"addresses": ["IP:PORT", ...]} once every engine listens, then serves
until SIGTERM or SIGINT.

Each engine listens on its own loopback IP and vLLM's port 8000, as a pod of the simulated fleet
does: shardwise's gateway learns endpoints as pod IP:8000, so every contender gets those same
addresses.

    python bench/gateway_engines.py --hosts 127.230.0.1,127.230.0.2 --ttft-ms 20 --itl-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import pathlib
import signal
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "runtime"))

from shardwise_runtime.sim import app  # noqa: E402
from shardwise_runtime.sim.config import EngineConfig  # noqa: E402
from shardwise_runtime.sim.engine import Engine  # noqa: E402

MODEL = "bench-model"
# Wider than any concurrency the bench sends (per engine), so no request waits for a batch slot.
MAX_CONCURRENCY = 65536


def build_engine(host: str, port: int, ttft_ms: float, itl_ms: float, seed: int) -> Engine:
    """One engine whose TTFT and ITL do not depend on batch size or prompt length."""
    engine = Engine(
        EngineConfig(
            host=host,
            port=port,
            model=f"shardwise/{MODEL}",
            served_model_names=(MODEL,),
            ttft_ms=ttft_ms,
            itl_ms=itl_ms,
            max_concurrency=MAX_CONCURRENCY,
            seed=seed,
        )
    )
    # Flat timing: EngineConfig does not expose these two knobs; the model is a frozen dataclass.
    engine.latency = dataclasses.replace(
        engine.latency, batch_slowdown=0.0, prompt_fixed_fraction=1.0
    )
    return engine


async def serve(hosts: list[str], port: int, ttft_ms: float, itl_ms: float) -> None:
    runners = []
    addresses = []
    try:
        for index, host in enumerate(hosts):
            engine = build_engine(host, port, ttft_ms, itl_ms, seed=index)
            runner, bound = await app.start_site(engine, shutdown_timeout_s=1.0)
            runners.append(runner)
            addresses.append(f"{host}:{bound}")
        print(json.dumps({"addresses": addresses}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", required=True, help="comma-separated loopback IPs, one engine each")
    parser.add_argument("--port", type=int, default=8000, help="0: a free port per engine")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    args = parser.parse_args()
    factory = None
    with contextlib.suppress(ImportError):
        # uvloop when installed (the bench extra): the engines then cost less of the machine.
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.hosts.split(","), args.port, args.ttft_ms, args.itl_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
