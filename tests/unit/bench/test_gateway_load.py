"""bench/gateway_load.py: every stream is checked, and a ramp leaves each worker's first one unsampled."""

from __future__ import annotations

import pathlib
import sys

import pytest

from shardwise_runtime.sim import app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

import gateway_load as load  # noqa: E402

pytestmark = pytest.mark.anyio

ENGINE = EngineConfig(host="127.0.0.1", port=0, model="/models/bench", served_model_names=(load.MODEL,),
                      ttft_ms=40.0, itl_ms=5.0, max_concurrency=16, max_model_len=512)


async def _run(ramp_s: float, *, tokens: int = 4) -> load.Samples:
    engine = Engine(ENGINE)
    runner, port = await app.start_site(engine, shutdown_timeout_s=0.1)
    try:
        samples, wall_s = await load.run_load([f"http://127.0.0.1:{port}"], requests=12, concurrency=4,
                                              tokens=tokens, time_limit_s=60.0, request_timeout_s=30.0,
                                              ramp_s=ramp_s)
    finally:
        await runner.cleanup()
    assert wall_s > 0
    return samples


async def test_without_a_ramp_every_stream_is_sampled() -> None:
    samples = await _run(0.0)
    assert (samples.ok, samples.errors) == (12, 0)
    assert len(samples.ttft) == 12 and len(samples.gaps) == 12 * 3


async def test_a_ramp_leaves_out_each_workers_first_stream() -> None:
    # Every worker starts within the ramp, long before a stream (55 ms) ends, so each sends one.
    samples = await _run(0.01)
    assert (samples.ok, samples.errors) == (12 - 4, 0)
    assert len(samples.ttft) == 8


async def test_the_ramps_streams_still_count_their_errors() -> None:
    # The engine caps max_tokens at its context: asking past it fails every stream, sampled or not.
    samples = await _run(0.01, tokens=10_000)
    assert (samples.ok, samples.errors) == (0, 12)
    assert samples.error_examples and samples.error_examples[0].startswith("HTTP 400")
