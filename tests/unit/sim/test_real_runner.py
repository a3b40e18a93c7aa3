"""The fleet's kubelet role for real-engine pods, with a real process standing in for vLLM."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys

from shardwise_runtime.sim import loopback, real_runner
from shardwise_runtime.sim.real import Probe, RealLaunch

# A tiny /health server that answers only after a start delay, like an engine loading.
SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/health' else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"""


def _launch(port: int, delay_s: float = 0.5, startup_failures: int = 100) -> RealLaunch:
    probe = Probe(path="/health", port=port, period_s=0.2, failure_threshold=3, timeout_s=1)
    return RealLaunch(host="127.0.0.1", argv=(sys.executable, "-c", SERVER, str(port), str(delay_s)),
                      env=tuple(os.environ.items()), changes=("test",),
                      startup=Probe(path="/health", port=port, period_s=0.2,
                                    failure_threshold=startup_failures, timeout_s=1),
                      readiness=probe, liveness=probe)


async def _until(predicate, timeout_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_ready_after_health_then_restart_on_exit(tmp_path: pathlib.Path) -> None:
    reports: list[tuple[bool, int, str]] = []

    async def report(key: str, ready: bool, restarts: int, reason: str) -> None:
        reports.append((ready, restarts, reason))

    async def scenario() -> None:
        engines = real_runner.RealEngines(tmp_path, report)
        real_runner.RESTART_BACKOFF_S = 0.1
        await engines.apply({"ns/p": _launch(loopback.free_port())})
        try:
            await _until(lambda: any(r[0] for r in reports))
            container = engines.containers["ns/p"]
            assert container.process is not None
            os.kill(container.process.pid, signal.SIGKILL)  # the engine dies
            await _until(lambda: any(not r[0] and r[1] == 1 for r in reports))
            await _until(lambda: reports[-1][0] and reports[-1][1] == 1)  # restarted and ready
        finally:
            await engines.close()

    asyncio.run(scenario())
    assert reports[0] == (True, 0, "ProbeSucceeded")
    assert (tmp_path / "ns_p.log").read_text().count("--- changed from the rendered container: test") == 2


def test_startup_probe_that_runs_out_restarts_the_container(tmp_path: pathlib.Path) -> None:
    reports: list[tuple[bool, int, str]] = []

    async def report(key: str, ready: bool, restarts: int, reason: str) -> None:
        reports.append((ready, restarts, reason))

    async def scenario() -> None:
        engines = real_runner.RealEngines(tmp_path, report)
        real_runner.RESTART_BACKOFF_S = 0.1
        # Starts after 30 s but the startup probe allows 3 x 0.2 s: it must be restarted.
        await engines.apply({"ns/slow": _launch(loopback.free_port(), delay_s=30, startup_failures=3)})
        try:
            await _until(lambda: engines.containers["ns/slow"].restarts >= 1)
        finally:
            await engines.close()

    asyncio.run(scenario())
    assert not any(ready for ready, _, _ in reports)


def test_an_address_served_by_someone_else_is_not_mistaken_for_this_pods_engine(tmp_path: pathlib.Path) -> None:
    """Parallel clusters can share a loopback pod IP: a foreign /health must not make this pod Ready."""
    import http.server
    import threading

    port = loopback.free_port()
    foreign = http.server.HTTPServer(("127.0.0.1", port), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    reports: list[tuple[bool, int, str]] = []

    async def report(key: str, ready: bool, restarts: int, reason: str) -> None:
        reports.append((ready, restarts, reason))

    async def scenario() -> None:
        engines = real_runner.RealEngines(tmp_path, report)
        real_runner.RESTART_BACKOFF_S = 0.1
        await engines.apply({"ns/p": _launch(port)})
        try:
            await asyncio.sleep(1.5)
            assert engines.containers["ns/p"].process is None  # never started beside the squatter
            foreign.shutdown()
            foreign.server_close()
            await _until(lambda: any(r[0] for r in reports))  # then it starts and turns Ready
        finally:
            await engines.close()

    asyncio.run(scenario())
