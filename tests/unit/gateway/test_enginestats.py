"""The picker's engine scrape: vLLM's filtered /metrics/, and /metrics for engines that cannot filter."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from shardwise.gateway.service import enginestats
from shardwise_runtime.sim import app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

pytestmark = pytest.mark.anyio

ENGINE = EngineConfig(host="127.0.0.1", port=0, model="/models/tiny", served_model_names=("tiny",),
                      ttft_ms=5.0, itl_ms=1.0, max_concurrency=8, max_model_len=256)


@contextlib.asynccontextmanager
async def _served(application: web.Application) -> AsyncIterator[tuple[str, list[tuple[str, list[str]]]]]:
    """Serve `application` on a free port; yields its endpoint and every (path, name[]s) it was asked."""
    asked: list[tuple[str, list[str]]] = []

    @web.middleware
    async def record(request: web.Request, handler):  # type: ignore[no-untyped-def]
        asked.append((request.path, request.query.getall("name[]", [])))
        return await handler(request)

    application.middlewares.append(record)
    runner = web.AppRunner(application, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"127.0.0.1:{port}", asked
    finally:
        await runner.cleanup()


async def test_a_vllm_engine_is_asked_for_the_two_gauges_only() -> None:
    engine = Engine(ENGINE)
    engine.waiting, engine.kv_tokens = 3, engine.kv_cache_tokens // 4
    async with _served(app.build_app(engine)) as (endpoint, asked), aiohttp.ClientSession() as session:
        reader = enginestats.EngineStatsReader(session)
        first = await reader.read(endpoint)
        second = await reader.read(endpoint)
    assert first == second
    assert first.waiting == 3 and first.kv_cache_usage == pytest.approx(0.25)
    assert asked == [(enginestats.FILTERED_PATH, list(enginestats.GAUGES))] * 2
    assert reader.unfiltered == set()


async def test_an_engine_without_the_filter_is_asked_metrics_from_then_on() -> None:
    exposition = Engine(ENGINE).exposition()  # the whole text, as an engine that ignores name[] sends

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=exposition, content_type="text/plain")

    older = web.Application()
    older.router.add_get(enginestats.FULL_PATH, metrics)  # /metrics/ is a 404 here
    async with _served(older) as (endpoint, asked), aiohttp.ClientSession() as session:
        reader = enginestats.EngineStatsReader(session)
        first = await reader.read(endpoint)
        second = await reader.read(endpoint)
    assert first == second and first.waiting == 0
    assert [path for path, _ in asked] == [enginestats.FILTERED_PATH, enginestats.FULL_PATH, enginestats.FULL_PATH]
    assert reader.unfiltered == {endpoint}


async def test_an_engine_that_answers_neither_raises() -> None:
    async with _served(web.Application()) as (endpoint, _), aiohttp.ClientSession() as session:
        with pytest.raises(enginestats.Unanswered):
            await enginestats.EngineStatsReader(session).read(endpoint)


async def test_an_endpoint_that_is_gone_is_forgotten_so_a_new_engine_on_its_address_is_asked_afresh() -> None:
    async with aiohttp.ClientSession() as session:
        reader = enginestats.EngineStatsReader(session)
        reader.unfiltered = {"10.0.0.1:8000", "10.0.0.2:8000"}
        reader.retain({"10.0.0.2:8000", "10.0.0.3:8000"})
    assert reader.unfiltered == {"10.0.0.2:8000"}
