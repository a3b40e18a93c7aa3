"""Forming a multi-node vLLM group before vLLM starts, so a missing member has a clear error.

Why: vLLM's multi-node start is a torch.distributed store on the leader that the other ranks
join; when one never comes, every rank hangs and then fails with a store timeout that names
nobody. The launcher runs a tiny TCP exchange first: each worker connects to the leader and says
`join <rank>`; when all ranks 1..N-1 have joined, the leader answers `go` to each and everyone
execs vLLM. A leader that waits longer than the group timeout fails with
"worker never joined: 1 of 2 nodes after 600s (missing node ranks: 1)"; a worker whose leader
never answers fails the same way, and LeaderWorkerSet recreates the group.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

log = logging.getLogger("shardwise.launch")

_LINE_LIMIT = 64


class GroupTimeout(Exception):
    """The group did not form in time; the text says who was missing."""


def listen(port: int) -> socket.socket:
    """The leader's rendezvous socket (port 0 picks a free port, for tests)."""
    return socket.create_server(("", port), family=socket.AF_INET, reuse_port=False)


def wait_for_workers(server: socket.socket, nodes: int, timeout_s: float,
                     clock: Callable[[], float] = time.monotonic) -> None:
    """Leader: wait until ranks 1..nodes-1 have joined, then release them all."""
    deadline = clock() + timeout_s
    joined: dict[int, socket.socket] = {}
    try:
        while len(joined) < nodes - 1:
            remaining = deadline - clock()
            if remaining <= 0:
                missing = sorted(set(range(1, nodes)) - set(joined))
                raise GroupTimeout(
                    f"worker never joined: {len(joined) + 1} of {nodes} nodes after "
                    f"{timeout_s:g}s (missing node ranks: {', '.join(map(str, missing))})")
            server.settimeout(min(remaining, 1.0))
            try:
                conn, address = server.accept()
            except TimeoutError:
                continue
            rank = _read_join(conn, nodes)
            if rank is None:
                conn.close()
                continue
            # A worker that restarted joins again: its newest connection is the live one.
            previous = joined.pop(rank, None)
            if previous is not None:
                previous.close()
            joined[rank] = conn
            log.info("node rank %d joined from %s (%d of %d nodes)", rank, address[0],
                     len(joined) + 1, nodes)
        for rank, conn in joined.items():
            try:
                conn.sendall(b"go\n")
            except OSError as error:
                # That worker left after joining; its vLLM rank will be missing and vLLM's own
                # timeout ends the group, which LeaderWorkerSet then recreates.
                log.warning("node rank %d left after joining: %s", rank, error)
    finally:
        for conn in joined.values():
            conn.close()
        server.close()


def join_leader(address: str, port: int, rank: int, timeout_s: float,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], object] = time.sleep, retry_s: float = 2.0) -> None:
    """Worker: join the leader's group and wait for its `go`."""
    deadline = clock() + timeout_s
    last_error = "no answer"
    while (remaining := deadline - clock()) > 0:
        try:
            # The leader's name resolves and accepts only once its pod runs: retry until then.
            with socket.create_connection((address, port), timeout=min(remaining, 5.0)) as conn:
                conn.sendall(f"join {rank}\n".encode())
                conn.settimeout(max(deadline - clock(), 0.001))
                if _read_line(conn) == "go":
                    return
                last_error = "the leader closed the connection"
        except OSError as error:
            last_error = str(error) or type(error).__name__
        sleep(min(retry_s, max(deadline - clock(), 0)))
    raise GroupTimeout(f"leader never started the group: {address}:{port} did not answer node "
                       f"rank {rank} within {timeout_s:g}s (last error: {last_error})")


def _read_join(conn: socket.socket, nodes: int) -> int | None:
    conn.settimeout(5.0)
    try:
        verb, _, raw = _read_line(conn).partition(" ")
        rank = int(raw)
    except (OSError, ValueError):
        return None
    if verb != "join" or not 1 <= rank < nodes:
        log.warning("ignoring a rendezvous message for rank %r in a group of %d", raw, nodes)
        return None
    return rank


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < _LINE_LIMIT:
        chunk = conn.recv(_LINE_LIMIT)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()
