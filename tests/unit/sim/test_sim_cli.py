"""The `shardwise-sim` command line: exact flags, loopback refusal, the load summary on stdout."""

from __future__ import annotations

import asyncio
import csv
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from shardwise_runtime.sim import app, server
from shardwise_runtime.sim.engine import Engine
from sim_support import TINY


@pytest.fixture
def engine_url() -> Iterator[str]:
    """An engine on its own loop in a thread, since the CLI runs its own asyncio.run."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    async def start() -> None:
        box["runner"], port = await app.start_site(Engine(TINY), shutdown_timeout_s=0.1)
        box["url"] = f"http://127.0.0.1:{port}/v1"
        started.set()

    def serve() -> None:
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=serve)
    thread.start()
    assert started.wait(10)
    yield str(box["url"])
    runner = box["runner"]
    assert isinstance(runner, web.AppRunner)
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_serve_refuses_a_routable_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert server.main(["serve", "--host", "10.0.0.1", "--model", "m"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_load_refuses_a_routable_target(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "load",
        "--base-url",
        "http://10.0.0.1:8000/v1",
        "--model",
        "m",
        "--rps",
        "1",
        "--duration",
        "1",
    ]
    assert server.main(argv) == 2
    assert "non-loopback" in capsys.readouterr().err


def test_load_prints_a_json_summary_and_writes_the_csv(
    engine_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "client.csv"
    argv = [
        "load",
        "--base-url",
        engine_url,
        "--model",
        "tiny",
        "--rps",
        "40",
        "--duration",
        "0.1",
        "--max-tokens",
        "8",
        "--csv",
        str(out),
    ]
    assert server.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 4 and summary["errors"] == 0
    assert 0 < summary["ttft_p50_ms"] <= summary["ttft_p95_ms"] < summary["e2e_p95_ms"]
    rows = list(csv.DictReader(out.open()))
    assert [row["chunks"] for row in rows] == ["9"] * 4
