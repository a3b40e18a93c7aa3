"""A throwaway Redis for tests and `make demo`: Debian's `redis-server` on 127.0.0.1, a free
port, no persistence (`--save '' --appendonly no`), so a stop loses everything as a crash would.

`RedisServer(log_dir).start()` returns once it answers PING; `stop()` and `start()` again keep the
port, which is how the e2e tests take the gateway's quota store away and bring it back.
"""

from __future__ import annotations

import pathlib
import shutil
import socket

from shardwise.devcluster.processes import Process, free_port, wait_until


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, log_dir: pathlib.Path, *, name: str = "redis") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("no redis-server: apt-get install -y redis-server (hack/install-deps.sh)")
        self.port = free_port()
        self.process = Process(name, [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--protected-mode", "no", "--dir", str(log_dir)],
                               log_dir / f"{name}.log")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> "RedisServer":
        self.process.start()
        wait_until(lambda: _ping(self.port), timeout=timeout, what="redis-server PONG", process=self.process)
        return self

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
