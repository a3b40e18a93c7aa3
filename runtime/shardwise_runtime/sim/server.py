"""`shardwise-sim`: serve one simulated engine, run the fleet manager, or generate load.

    shardwise-sim serve --host IP [--port 8000] --model NAME [--served-model-name NAME ...]
                        [--ttft-ms X] [--itl-ms Y] [--max-concurrency N] [--max-model-len L]
                        [--tensor-parallel-size T] [--seed S]
                        [--enable-lora [--max-lora-rank R] [--max-loras N] [--max-cpu-loras N]
                         [--lora-modules name=path|JSON ...]]
    shardwise-sim fleet --kubeconfig PATH [--namespace NS|all]
    shardwise-sim load  (--base-url URL [--base-url URL ...] |
                         --deployment NAME --kubeconfig PATH [--namespace NS])
                        --model NAME --rps R --duration S
                        [--concurrency C] [--max-tokens N] [--timeout S] [--csv OUT]

Only argument parsing and process wiring live here; each command's work is in its own module.
`serve` reads the environment vLLM reads: VLLM_ALLOW_RUNTIME_LORA_UPDATING (the load/unload
routes), HF_ENDPOINT and HF_HUB_OFFLINE (where adapters given as hub ids come from).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import signal
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from shardwise_runtime.sim import app, load
from shardwise_runtime.sim import config as sim_config
from shardwise_runtime.sim.config import VLLM_PORT, EngineConfig
from shardwise_runtime.sim.engine import Engine


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwise-sim", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve one simulated vLLM engine")
    defaults = EngineConfig(host="127.0.0.1", model="-", served_model_names=("-",))
    serve.add_argument("--host", required=True, help="loopback IP to bind (127.0.0.0/8 or ::1)")
    serve.add_argument("--port", type=int, default=VLLM_PORT)
    serve.add_argument("--model", required=True, help="the model path vLLM would load")
    serve.add_argument(
        "--served-model-name", nargs="+", default=None, help="names clients use (default: --model)"
    )
    serve.add_argument(
        "--ttft-ms",
        type=float,
        default=defaults.ttft_ms,
        help="TTFT on an idle engine for a 512-token prompt",
    )
    serve.add_argument(
        "--itl-ms",
        type=float,
        default=defaults.itl_ms,
        help="inter-token latency for a batch of one",
    )
    serve.add_argument(
        "--max-concurrency",
        type=int,
        default=defaults.max_concurrency,
        help="running batch size; further requests queue",
    )
    serve.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    serve.add_argument("--tensor-parallel-size", type=int, default=defaults.tensor_parallel_size)
    serve.add_argument("--seed", type=int, default=defaults.seed)
    serve.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters")
    serve.add_argument(
        "--max-lora-rank",
        type=int,
        choices=sim_config.LORA_RANKS,
        default=sim_config.DEFAULT_MAX_LORA_RANK,
    )
    serve.add_argument(
        "--max-loras",
        type=int,
        default=sim_config.DEFAULT_MAX_LORAS,
        help="adapters in one batch (the max_lora label)",
    )
    serve.add_argument("--max-cpu-loras", type=int, default=None)
    serve.add_argument(
        "--lora-modules",
        nargs="+",
        default=None,
        help="adapters loaded at start: name=path, or JSON {name, path, base_model_name}",
    )

    fleet = commands.add_parser("fleet", help="serve an engine on every serving pod's loopback IP")
    fleet.add_argument("--kubeconfig", required=True)
    fleet.add_argument("--namespace", default="all", help="a namespace, or `all` (default)")
    fleet.add_argument(
        "--real-engine-home",
        type=pathlib.Path,
        default=None,
        help="the folder hack/install-vllm.sh prints: pods whose image is "
        "shardwise.local/vllm-cpu:0.32.0 run the real vLLM from there",
    )
    fleet.add_argument(
        "--log-dir", type=pathlib.Path, default=pathlib.Path("."), help="real engines' logs"
    )

    hub = commands.add_parser("hub", help="a local Hugging Face hub serving repositories from a folder")
    hub.add_argument("--root", required=True, help="folder holding <org>/<name>/ repositories")
    hub.add_argument("--host", default="127.0.0.1")
    hub.add_argument("--port", type=int, default=8090)
    hub.add_argument("--throttle-bps", type=int, default=0, help="bytes/s per download (0: unthrottled)")
    hub.add_argument("--tiny-model", default=None, help="first write a tiny model as this repository id")
    hub.add_argument("--tiny-model-bytes", type=int, default=64 << 20, help="its weight bytes")

    pods = commands.add_parser("pods", help="run model downloader pods as local processes")
    pods.add_argument("--kubeconfig", required=True)
    pods.add_argument("--namespace", default="all", help="a namespace, or `all` (default)")
    pods.add_argument("--work-dir", required=True, help="logs, termination messages, emptyDirs")

    loadgen = commands.add_parser("load", help="stream chat requests at a fixed rate")
    where = loadgen.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--base-url",
        action="append",
        help="OpenAI base URL on loopback, e.g. http://127.1.0.5:8000/v1; "
        "repeat to round-robin over replicas",
    )
    where.add_argument(
        "--deployment",
        help="follow this InferenceDeployment's ready serving pods "
        "(needs --kubeconfig and --namespace)",
    )
    loadgen.add_argument("--kubeconfig", help="with --deployment")
    loadgen.add_argument("--namespace", default="default", help="with --deployment")
    loadgen.add_argument("--model", required=True)
    loadgen.add_argument("--rps", type=float, required=True)
    loadgen.add_argument("--duration", type=float, required=True, help="seconds")
    loadgen.add_argument("--concurrency", type=int, default=64)
    loadgen.add_argument("--max-tokens", type=int, default=32)
    loadgen.add_argument("--timeout", type=float, default=60.0, help="per-request seconds")
    loadgen.add_argument("--csv", default=None, help="write one row per request here")
    loadgen.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY", "EMPTY"),
        help="sent as Authorization: Bearer (a gateway with API keys); default $OPENAI_API_KEY",
    )
    return parser


def _lora_config(args: argparse.Namespace) -> sim_config.LoraConfig | None:
    if not args.enable_lora:
        if args.lora_modules:
            raise ValueError("--lora-modules needs --enable-lora")
        return None
    return sim_config.LoraConfig(
        max_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        modules=sim_config.parse_lora_modules(args.lora_modules or ()),
        hub_endpoint=os.environ.get("HF_ENDPOINT") or None,
        hub_offline=sim_config.env_flag(os.environ.get("HF_HUB_OFFLINE")),
    )


def _serve(args: argparse.Namespace) -> int:
    engine_config = EngineConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        served_model_names=tuple(args.served_model_name or [args.model]),
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        max_concurrency=args.max_concurrency,
        max_model_len=args.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size,
        seed=args.seed,
        lora=_lora_config(args),
        runtime_lora_updating=sim_config.env_flag(
            os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
        ),
    )

    async def application() -> web.Application:
        # The engine's semaphore belongs to the loop run_app creates, so build it inside.
        return app.build_app(Engine(engine_config))

    web.run_app(
        application(), host=engine_config.host, port=engine_config.port, access_log=None, print=None
    )
    return 0


def _fleet(args: argparse.Namespace) -> int:
    # Imported here: the Kubernetes client is slow to import and only this command needs it.
    from shardwise_runtime.sim import fleet

    async def until_signalled() -> None:
        # SIGTERM must reach the `finally` that stops real-engine processes (own sessions).
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)  # type: ignore[union-attr]
        with contextlib.suppress(asyncio.CancelledError):
            await fleet.run_fleet(
                args.kubeconfig, args.namespace, real_home=args.real_engine_home, log_dir=args.log_dir
            )

    asyncio.run(until_signalled())
    return 0


def _hub(args: argparse.Namespace) -> int:
    import pathlib

    from shardwise_runtime.sim import hub, tinymodel

    root = pathlib.Path(args.root)
    if args.tiny_model:
        shards = 4
        tinymodel.write_tiny_model(root / args.tiny_model, shards=shards, shard_bytes=args.tiny_model_bytes // shards)
    local = hub.LocalHub(root, throttle_bps=args.throttle_bps)
    web.run_app(local.app(), host=args.host, port=args.port, access_log=None, print=None)
    return 0


def _pods(args: argparse.Namespace) -> int:
    import pathlib
    import signal
    import time

    from shardwise_runtime.sim.localpods import LocalPodRunner

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # stop the downloads too: they run in sessions of their own

    signal.signal(signal.SIGTERM, interrupt)
    runner = LocalPodRunner(args.kubeconfig, args.namespace, pathlib.Path(args.work_dir)).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
    return 0


def _load(args: argparse.Namespace) -> int:
    targets: load.Targets = args.base_url
    close_targets: Callable[[], None] | None = None
    if args.deployment:
        if not args.kubeconfig:
            raise ValueError("--deployment needs --kubeconfig")
        # Imported here for the same reason as in _fleet.
        from shardwise_runtime.sim import targets as pod_targets

        following = pod_targets.follow_deployment(args.kubeconfig, args.namespace, args.deployment)
        targets, close_targets = following, following.close
    try:
        records = asyncio.run(
            load.run_load(
                targets,
                args.model,
                args.rps,
                args.duration,
                concurrency=args.concurrency,
                max_tokens=args.max_tokens,
                request_timeout_s=args.timeout,
                api_key=args.api_key,
            )
        )
    finally:
        if close_targets is not None:
            close_targets()  # stop the refresh thread before interpreter finalization
    if args.csv:
        with open(args.csv, "w", encoding="utf-8") as out:
            load.write_csv(records, out)
    summary = load.summarize(records)
    figures = {
        key: (round(value * 1000, 1) if key.endswith("_s") and value is not None else value)
        for key, value in dataclasses.asdict(summary).items()
    }
    print(
        json.dumps(
            {
                key.removesuffix("_s") + ("_ms" if key.endswith("_s") else ""): value
                for key, value in figures.items()
            }
        )
    )
    return 0 if summary.requests > summary.errors else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `shardwise-sim`."""
    args = _parser().parse_args(argv)
    # The load generator's stdout is its JSON summary; HTTP clients' per-request INFO lines
    # would drown it.
    level = logging.WARNING if args.command == "load" else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        commands = {"serve": _serve, "fleet": _fleet, "load": _load, "hub": _hub, "pods": _pods}
        return commands[args.command](args)
    except ValueError as error:
        print(f"shardwise-sim: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
