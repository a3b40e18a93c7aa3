"""scrape(): concurrent, per-target timeouts, every failure reported as data (local HTTP server)."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web

from shardwise.observe import collector


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("10.0.0.7", "http://10.0.0.7:8000/metrics"),
        ("127.0.0.2:9000", "http://127.0.0.2:9000/metrics"),
        ("fd00::7", "http://[fd00::7]:8000/metrics"),
        ("[fd00::7]", "http://[fd00::7]:8000/metrics"),
        ("[fd00::7]:9000", "http://[fd00::7]:9000/metrics"),
    ],
)
def test_metrics_url(address: str, url: str) -> None:
    assert collector.metrics_url(address) == url


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _scrape_all(t1_text: str) -> tuple[collector.ScrapeResult, list[float]]:
    async def good(_: web.Request) -> web.Response:
        return web.Response(text=t1_text, content_type="text/plain")

    release = asyncio.Event()  # lets the slow handlers finish so cleanup need not wait for them
    slow_arrivals: list[float] = []  # loop time at which each slow pod was asked

    async def slow(_: web.Request) -> web.Response:
        slow_arrivals.append(asyncio.get_running_loop().time())
        await release.wait()
        return web.Response(text=t1_text)

    async def unavailable(_: web.Request) -> web.Response:
        return web.Response(status=503, text="loading model")

    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html>proxy error</html>", content_type="text/html")

    apps = {}
    runners = []
    handlers = {"good": good, "slow": slow, "slow-too": slow, "unavailable": unavailable, "html": html}
    for name, handler in handlers.items():
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        apps[name] = f"127.0.0.1:{port}"
    apps["refused"] = f"127.0.0.1:{_closed_port()}"
    try:
        async with aiohttp.ClientSession() as session:
            result = await collector.scrape(apps, timeout_s=0.5, session=session)
            return result, slow_arrivals
    finally:
        release.set()
        for runner in runners:
            await runner.cleanup()


def test_one_bad_pod_never_spoils_the_others(t1_text: str) -> None:
    result, slow_arrivals = asyncio.run(_scrape_all(t1_text))
    assert set(result.samples) == {"good"}
    assert result.samples["good"].counters["vllm:request_success_total"] == 43.0
    kinds = {pod: e.kind for pod, e in result.errors.items()}
    assert kinds == {
        "slow": "timeout", "slow-too": "timeout", "unavailable": "http", "html": "parse", "refused": "connect"
    }
    assert "503" in result.errors["unavailable"].message
    # Concurrent: the second slow pod was asked before the first one's 0.5 s timeout could fire
    # (a serial scrape asks it only after). Both run on one event loop, so load delays them alike.
    first, second = slow_arrivals
    assert second - first < 0.5
