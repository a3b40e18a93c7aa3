"""Aggregated vs disaggregated (prefill/decode) serving at equal GPU count, on a long-prompt and a
short-prompt workload: ITL p95, TTFT p95 and output tokens/s per GPU, with the planner's pick.

Two sources, side by side, because neither alone is honest about everything:
- sim: simulated engines (runtime/shardwise_runtime/sim) on loopback, latencies from the
  measured table for the GPU and TP, a Poisson load through a client that plays the P/D router
  (prefill engine with max_tokens 1, then the decode engine streaming with the returned
  kv_transfer_params, the protocol of vLLM's proxy); aggregated engines get the request whole.
  The simulator's decode step slows with the batch size but NOT with prompt tokens prefilled in
  the same step, so it cannot show prefill stalling decode: its aggregated ITL is optimistic and
  the ITL gap disaggregation closes does not appear in the sim rows. TTFT (prefill queueing,
  the hand-off) and tokens/s per GPU (GPUs split between roles) it does show.
- planner: planner/disaggregation.py's model for the same GPUs and rate (its step model does
  charge a step's prompt tokens to every running stream): the ITL comparison comes from here.
The planner's pick is `choose(..., policy Auto)` with the SLOs printed.
Run: `.venv/bin/python bench/bench_disaggregation.py` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pathlib
import random
import statistics
import time
from typing import Any

import httpx

from shardwise import planner
from shardwise.planner import cli as plan_cli
from shardwise.planner import disaggregation as dg
from shardwise_runtime.sim import app, measured
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

ROOT = pathlib.Path(__file__).resolve().parents[1]
NODES = ROOT / "tests/fixtures/nodes/h100-nvswitch-2x8.yaml"
GPU = "NVIDIA-H100-80GB-HBM3"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PARAMETERS = 8.03e9
GPUS = 4
SLO = dg.SLO(ttft_s=2.0, itl_s=0.008)
# name: (prompt tokens, output tokens, requests/s)
WORKLOADS = {"long prompt": (6000, 150, 6.0), "short prompt": (200, 150, 12.0)}


@dataclasses.dataclass(frozen=True)
class Figures:
    ttft_p95_ms: float
    itl_p95_ms: float
    tokens_per_s_per_gpu: float
    requests: int


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 2 else (values[0] if values else 0.0)


def _engine(tp: int, role: str | None) -> Engine:
    found = measured.base_latencies(GPU, PARAMETERS, 2.0, tp)
    assert found is not None
    ttft, itl = found
    return Engine(EngineConfig(host="127.0.0.1", port=0, model=MODEL, served_model_names=("m",), ttft_ms=ttft,
                               itl_ms=itl, max_concurrency=64, max_model_len=8192, tensor_parallel_size=tp,
                               role=role, kv_connector="NixlConnector" if role else None))


async def _serve(engines: list[Engine]) -> tuple[list[Any], list[str]]:
    started = [await app.start_site(e, shutdown_timeout_s=0.1) for e in engines]
    return [r for r, _ in started], [f"http://127.0.0.1:{p}" for _, p in started]


def _least_busy(engines: list[Engine], urls: list[str]) -> str:
    return urls[min(range(len(engines)), key=lambda i: engines[i].running + engines[i].waiting)]


async def _one(http: httpx.AsyncClient, body: dict[str, Any], prefill: tuple[list[Engine], list[str]] | None,
               decode: tuple[list[Engine], list[str]]) -> tuple[float, list[float], int]:
    start = time.monotonic()
    if prefill is not None:  # the P/D router's first call: the prompt's KV, one token
        first = await http.post(_least_busy(*prefill) + "/v1/completions", json={**body, "max_tokens": 1})
        body = {**body, "kv_transfer_params": first.json()["kv_transfer_params"]}
    stamps: list[float] = []
    async with http.stream("POST", _least_busy(*decode) + "/v1/completions", json={**body, "stream": True}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                if json.loads(line[6:])["choices"][0]["text"]:
                    stamps.append(time.monotonic())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return stamps[0] - start, gaps, len(stamps)


async def measure(shape: tuple[int, int] | tuple[int, int, int, int], prompt: int, output: int, rate: float,
                  seconds: float, seed: int) -> Figures:
    """shape: (replicas, tp) aggregated, or (prefill replicas, prefill tp, decode replicas, decode tp)."""
    if len(shape) == 2:
        prefill, decode = None, [_engine(shape[1], None) for _ in range(shape[0])]
        gpus = shape[0] * shape[1]
    else:
        prefill = [_engine(shape[1], "prefill") for _ in range(shape[0])]
        decode = [_engine(shape[3], "decode") for _ in range(shape[2])]
        gpus = shape[0] * shape[1] + shape[2] * shape[3]
    runners, urls = await _serve((prefill or []) + decode)
    p_urls, d_urls = urls[:len(prefill or [])], urls[len(prefill or []):]
    body = {"model": "m", "prompt": "x" * 4 * prompt, "max_tokens": output}
    rng = random.Random(seed)
    tasks = []
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        began = time.monotonic()
        at = 0.0
        while at < seconds:
            await asyncio.sleep(max(0.0, began + at - time.monotonic()))
            tasks.append(asyncio.create_task(_one(http, body, (prefill, p_urls) if prefill else None,
                                                  (decode, d_urls))))
            at += rng.expovariate(rate)
        done = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - began
    for runner in runners:
        await runner.cleanup()
    return Figures(ttft_p95_ms=_p95([d[0] for d in done]) * 1e3,
                   itl_p95_ms=_p95([g for d in done for g in d[1]]) * 1e3,
                   tokens_per_s_per_gpu=sum(d[2] for d in done) / elapsed / gpus, requests=len(done))


def planned(prompt: int, output: int, rate: float) -> tuple[dg.Choice, dg.Aggregated | None]:
    """The planner's pick within GPUS, and its aggregated layout's TP filling all GPUS (equal count)."""
    spec = {"model": {"name": MODEL}, "serving": {"maxModelLen": 8192, "maxConcurrency": 64},
            "workload": {"promptTokens": prompt, "outputTokens": output}}
    request = planner.request_from_spec(spec)
    nodes, pods = plan_cli._objects(str(NODES))
    pool = planner.inventory_from_nodes(nodes, pods).pools[0]
    choice = dg.choose(request, pool.shape, GPUS, rate, SLO, policy="Auto")
    tp = choice.aggregated.layout.tp if choice.aggregated else 1
    return choice, dg.aggregated_on(request, pool.shape, tp, GPUS, rate, SLO)


def _row(name: str, source: str, gpus: int, f: Figures | dg.Outcome) -> str:
    if isinstance(f, Figures):
        return (f"  {name:<32} {gpus:>4} {source:<8} {f.ttft_p95_ms:>9.0f} {f.itl_p95_ms:>8.1f} "
                f"{f.tokens_per_s_per_gpu:>9.0f}")
    return (f"  {name:<32} {gpus:>4} {source:<8} {f.ttft_s * 1e3:>9.0f} {f.itl_s * 1e3:>8.1f} "
            f"{f.output_tokens_per_s / f.gpus:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0, help="load duration per run")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"{MODEL} on {GPUS} x {GPU} (one NVSwitch node), simulated engines: measured-table latencies; "
          f"SLO for the pick: TTFT {SLO.ttft_s * 1e3:.0f} ms, ITL {SLO.itl_s * 1e3:.0f} ms")
    print("  planner = the planner's model (means); sim = simulated engines (p95; ITL blind to prefill stalls); "
          "tokens/s at the offered rate")
    for workload, (prompt, output, rate) in WORKLOADS.items():
        choice, agg = planned(prompt, output, rate)
        pair = choice.pair
        assert agg is not None and pair is not None, choice.reason
        agg_shape = (agg.replicas, agg.layout.tp)
        pair_shape = (pair.prefill_replicas, pair.prefill.tp, pair.decode_replicas, pair.decode.tp)
        sim_agg = asyncio.run(measure(agg_shape, prompt, output, rate, args.seconds, args.seed))
        sim_pair = asyncio.run(measure(pair_shape, prompt, output, rate, args.seconds, args.seed))
        print(f"\n{workload}: {prompt}/{output} tokens at {rate:g} req/s ({sim_agg.requests} requests per sim run)")
        print(f"  {'configuration':<32} {'GPUs':>4} {'source':<8} {'TTFT-p95':>9} {'ITL-p95':>8} {'tok/s/GPU':>9}")
        a_name, p_name = f"aggregated {agg.describe()}", f"P/D {pair.describe()}"
        for name, source, figures in ((a_name, "sim", sim_agg), (p_name, "sim", sim_pair),
                                      (a_name, "planner", agg.outcome), (p_name, "planner", pair.outcome)):
            print(_row(name, source, agg.outcome.gpus if name == a_name else pair.outcome.gpus, figures))
        print(f"  ratio P/D / aggregated: sim ITL {sim_pair.itl_p95_ms / sim_agg.itl_p95_ms:.2f}, "
              f"TTFT {sim_pair.ttft_p95_ms / sim_agg.ttft_p95_ms:.2f}, tok/s/GPU "
              f"{sim_pair.tokens_per_s_per_gpu / sim_agg.tokens_per_s_per_gpu:.2f}; planner ITL "
              f"{pair.outcome.itl_s / agg.outcome.itl_s:.2f}, TTFT {pair.outcome.ttft_s / agg.outcome.ttft_s:.2f}")
        picked = choice.pair.describe() if choice.mode == dg.DISAGGREGATED and choice.pair else (
            choice.aggregated.describe() if choice.aggregated else "-")
        print(f"  planner's pick (Auto, within {GPUS} GPUs): {choice.mode} {picked}: {choice.reason.split(':')[0]}")


if __name__ == "__main__":
    main()
