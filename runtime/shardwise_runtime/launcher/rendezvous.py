"""Forming a multi-node vLLM group before vLLM starts, so a missing member has a clear error.

Why: vLLM's multi-node start is a torch.distributed store on the leader that the other ranks
join; when one never comes, every rank hangs and then fails with a store timeout that names
nobody. The launcher runs a tiny TCP exchange first: each worker connects to the leader and says
`join <rank>`; when all ranks 1..N-1 have joined, the leader answers `go` to each and everyone
execs vLLM. A leader that waits longer than the group timeout fails with
"worker never joined: 1 of 2 nodes after 600s (missing node ranks: 1)"; a worker whose leader
never answers fails the same way, and LeaderWorkerSet recreates the group.

Once formed, the connections stay open: `supervise` uses them as the group's heartbeat channel.
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


def listen(port: int, host: str = "") -> socket.socket:
    """The leader's rendezvous socket (port 0 picks a free port, for tests); `host` "" is every
    address, a pod IP binds only that one."""
    return socket.create_server((host, port), family=socket.AF_INET, reuse_port=False)


def wait_for_workers(server: socket.socket, nodes: int, timeout_s: float,
                     clock: Callable[[], float] = time.monotonic) -> dict[int, socket.socket]:
    """Leader: wait until ranks 1..nodes-1 have joined, then release them all.

    Returns the open connection of every worker that was told `go`, by node rank.
    """
    deadline = clock() + timeout_s
    joined: dict[int, socket.socket] = {}
    released: dict[int, socket.socket] = {}
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
                released[rank] = conn
            except OSError as error:
                # That worker left after joining; its vLLM rank will be missing and vLLM's own
                # timeout ends the group, which LeaderWorkerSet then recreates.
                log.warning("node rank %d left after joining: %s", rank, error)
        return released
    finally:
        for rank, conn in joined.items():
            if rank not in released:
                conn.close()
        server.close()


def join_leader(address: str, port: int, rank: int, timeout_s: float,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], object] = time.sleep,
                retry_s: float = 2.0) -> socket.socket:
    """Worker: join the leader's group and wait for its `go`; returns the open connection."""
    deadline = clock() + timeout_s
    last_error = "no answer"
    while (remaining := deadline - clock()) > 0:
        try:
            # The leader's name resolves and accepts only once its pod runs: retry until then.
            conn = socket.create_connection((address, port), timeout=min(remaining, 5.0))
            try:
                conn.sendall(f"join {rank}\n".encode())
                conn.settimeout(max(deadline - clock(), 0.001))
                if _read_line(conn).split("\n")[0].strip() == "go":
                    conn.settimeout(None)
                    return conn
            except BaseException:
                conn.close()
                raise
            conn.close()
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
