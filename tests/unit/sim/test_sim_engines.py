"""The simulated engine as SGLang and trtllm-serve: chosen by the rendered argv, their routes, and
scrapes the operator's parser reads as that engine's (observe/parse.py)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from shardwise.observe import collector, parse
from shardwise_runtime.sim import app, pods
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "org/m", "--served-model-name", "x",
          "--tp-size", "2", "--context-length", "4096", "--max-running-requests", "16", "--enable-metrics"]
TRTLLM = ["trtllm-serve", "org/m", "--host", "0.0.0.0", "--tp_size", "4", "--max_batch_size", "8",
          "--max_seq_len", "2048", "--extra_llm_api_options", "/etc/shardwise/trtllm/llm-api-options.yaml"]


def test_the_argv_picks_the_engine_and_its_flags_are_read() -> None:
    engine, args = pods.parse_engine_args(SGLANG)
    assert engine == "sglang" and (args.model, args.served_model_names) == ("org/m", ("x",))
    assert (args.max_model_len, args.max_num_seqs, args.tensor_parallel_size) == (4096, 16, 2)
    engine, args = pods.parse_engine_args(TRTLLM)
    assert engine == "trtllm" and args.model == "org/m"
    assert (args.max_model_len, args.max_num_seqs, args.tensor_parallel_size) == (2048, 8, 4)
    assert pods.engine_of(["vllm", "serve", "org/m"]) == "vllm"
    assert pods.engine_of(["sglang", "serve", "--model-path", "org/m"]) == "sglang"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_each_engine_answers_and_its_scrape_reads_as_its_own(engine: str) -> None:
    async def run() -> parse.Sample:
        served = Engine(EngineConfig(host="127.0.0.1", port=0, model="org/m", served_model_names=("x",),
                                     ttft_ms=2, itl_ms=1, engine=engine))
        runner, port = await app.start_site(served)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{base}/v1/completions",
                                        json={"model": "other" if engine == "trtllm" else "x",
                                              "prompt": "hi", "max_tokens": 3}) as response:
                    body = await response.json()
                    assert response.status == 200 and body["usage"]["completion_tokens"] == 3
                    # trtllm-serve answers under its one name (the fleet gives it the model path).
                    assert body["model"] == "x"
                routes = {"/health": 200, "/get_model_info": 200 if engine == "sglang" else 404,
                          "/version": 200 if engine == "trtllm" else 404}
                for path, code in routes.items():
                    async with session.get(base + path) as response:
                        assert response.status == code, path
                async with session.get(f"{base}/metrics") as response:
                    text = await response.text()
                if engine == "trtllm":  # JSON iteration stats, not Prometheus text
                    assert json.loads(text)[0]["kvCacheStats"]["maxNumBlocks"] > 0
                async with session.get(base + collector.metrics_path(engine)) as response:
                    return parse.parse(await response.text())
        finally:
            await runner.cleanup()

    sample = asyncio.run(run())
    assert sample.engine == engine
    assert sample.counters[parse.OUTPUT_TOKENS] == 3 and sample.counters[parse.REQUESTS] == 1
    assert sample.histograms[parse.TTFT].count == 1
