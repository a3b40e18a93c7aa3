"""The local hub on an event loop of its own thread: for tests and the demo, which need its counters."""

from __future__ import annotations

import asyncio
import pathlib
import threading

from shardwise_runtime.sim import hub


class HubThread:
    def __init__(self, root: pathlib.Path, *, host: str = "127.0.0.1", port: int = 0, throttle_bps: int = 0) -> None:
        self.hub = hub.LocalHub(root, throttle_bps=throttle_bps)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="local-hub", daemon=True)
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(hub.start(self.hub, host, port), self.loop).result(30)
        address = self.runner.addresses[0]
        self.url = f"http://{address[0]}:{address[1]}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __enter__(self) -> "HubThread":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
