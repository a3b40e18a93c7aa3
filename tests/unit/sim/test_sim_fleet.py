"""The fleet's engine set over real sockets: started on apply, gone when no longer desired."""

from __future__ import annotations

import socket

import httpx
import pytest
from shardwise_runtime.sim import fleet
from shardwise_runtime.sim.config import EngineConfig

pytestmark = pytest.mark.anyio

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _config(port: int, name: str) -> EngineConfig:
    return EngineConfig(
        host=HOST, port=port, model=name, served_model_names=(name,), ttft_ms=1.0, itl_ms=1.0
    )


async def test_apply_starts_restarts_and_stops_engines() -> None:
    port = _free_port()
    engines = fleet.Fleet()
    url = f"http://{HOST}:{port}/v1/models"
    try:
        async with httpx.AsyncClient() as http:
            await engines.apply({"ml/a": _config(port, "first")})
            assert (await http.get(url)).json()["data"][0]["id"] == "first"
            await engines.apply({"ml/a": _config(port, "second")})
            assert (await http.get(url)).json()["data"][0]["id"] == "second"
            await engines.apply({})
            assert engines.running == {}
            with pytest.raises(httpx.ConnectError):
                await http.get(url)
    finally:
        await engines.close()


async def test_a_taken_address_is_skipped_not_fatal() -> None:
    with socket.socket() as squatter:
        squatter.bind((HOST, 0))
        squatter.listen()
        engines = fleet.Fleet()
        await engines.apply({"ml/a": _config(squatter.getsockname()[1], "m")})
        assert engines.running == {}
