"""Liveness and readiness: answered from flags in memory, never from an API call.

- /healthz (liveness): the process can work: its loops' threads are alive and the API server
  answered within `unreachable_limit` seconds. It fails only after that long an outage, so a
  short one does not restart the operator; a restart cannot fix a long one either, but it does
  recover a process whose connections are wedged.
- /readyz (readiness): every cache has synced and the leader election is in touch with its Lease
  (this process leads or stands by). It fails within one lease duration of losing the API.
Both answer 200 "ok" or 503 with the reason as plain text, like the kube-apiserver's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

Check = Callable[[], str | None]  # None when healthy, else why not


class ApiContact:
    """When the API server last answered anything (a list, a watch event, a Lease round)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.last_ok: float | None = None

    def mark(self, ok: bool) -> None:
        if ok:
            self.last_ok = self._clock()

    def silent_for(self) -> float:
        return self._clock() - (self.last_ok if self.last_ok is not None else self.started)


def liveness(contact: ApiContact, unreachable_limit: float, threads: Callable[[], list[threading.Thread]]) -> Check:
    def check() -> str | None:
        dead = [t.name for t in threads() if not t.is_alive()]
        if dead:
            return f"threads stopped: {', '.join(dead)}"
        silent = contact.silent_for()
        if silent > unreachable_limit:
            return f"API server unreachable for {silent:.0f} s (limit {unreachable_limit:.0f} s)"
        return None
    return check


def readiness(synced: Callable[[], bool], election_state: Callable[[], str]) -> Check:
    def check() -> str | None:
        if not synced():
            return "caches not synced"
        state = election_state()
        if state not in ("leader", "standby"):
            return f"leader election out of touch with its Lease ({state})"
        return None
    return check


def serve(port: int, checks: dict[str, Check], host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve `checks` by path on a daemon thread; returns the server (`shutdown()` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            check = checks.get(self.path.split("?")[0])
            if check is None:
                self._answer(404, "not found")
                return
            try:
                problem = check()
            except Exception as exc:  # noqa: BLE001 - a broken check is a failed check
                problem = f"check failed: {exc}"
            self._answer(200, "ok") if problem is None else self._answer(503, problem)

        def _answer(self, code: int, text: str) -> None:
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - probes every few seconds
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
