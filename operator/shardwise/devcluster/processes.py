"""Start and stop the child processes of the local cluster, each logging to its own file."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    name: str
    argv: list[str]
    log_path: pathlib.Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        # A session of its own, so stopping it also stops anything it spawned.
        self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env={**os.environ, **(self.env or {})}, start_new_session=True)
        log.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.popen.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_until(predicate, *, timeout: float, interval: float = 0.2, what: str, process: Process | None = None):
    """Poll until predicate() returns a truthy value; on timeout say what was awaited and show logs."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited while waiting for {what}:\n{process.log_tail()}")
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - the last error is reported on timeout
            last_error = exc
        time.sleep(interval)
    tail = f"\n{process.name} log:\n{process.log_tail()}" if process else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error}){tail}")
