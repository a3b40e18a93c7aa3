"""Keeping a multi-node group honest once vLLM runs: every rank watches its peers.

Why: vLLM's leader keeps answering /health 200 after a worker rank dies; the next request hangs
and the leader only exits when its execute-model timeout (300 s) runs out, so a group that lost a
rank looks healthy to Kubernetes for minutes (seen with vLLM 0.32: about 6.5 minutes). So on a
multi-node launch the launcher does not exec vLLM; it runs it as a child in its own session and
keeps the rendezvous connections open as a heartbeat channel (leader <-> each worker):
- every `heartbeat_s` each side writes a line; a peer that closed its connection (its launcher
  exited: its vLLM died, or its pod was killed) or stayed silent for `peer_timeout_s` (its node
  vanished without closing anything) is lost;
- on a lost peer the launcher stops its own vLLM (SIGTERM to the session, SIGKILL after a grace)
  and exits 68. The leader's /health stops answering at once, so readiness fails within one
  probe period and the container ends; with LeaderWorkerSet's RecreateGroupOnPodRestart the
  whole group is recreated. Workers do the same when the leader goes;
- when vLLM exits by itself the launcher exits with its code, closing the connections, which
  tells the peers the same news;
- SIGTERM/SIGINT to the launcher are passed to vLLM, so a pod deletion stops it gracefully.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger("shardwise.launch")

EXIT_GROUP_LOST = 68
HEARTBEAT_S = 2.0
PEER_TIMEOUT_S = 20.0
STOP_GRACE_S = 15.0


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when its parent dies, even by SIGKILL (Linux), so a
    killed launcher or fleet never leaves a vLLM behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(child: subprocess.Popen[bytes], grace_s: float) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # engine-core and worker processes left behind


def run_group(argv: list[str], env: Mapping[str, str], peers: Mapping[int, socket.socket], *,
              heartbeat_s: float = HEARTBEAT_S, peer_timeout_s: float = PEER_TIMEOUT_S,
              grace_s: float = STOP_GRACE_S,
              clock: Callable[[], float] = time.monotonic) -> int:
    """Run vLLM while every peer lives; the container's exit code."""
    child = subprocess.Popen(argv, env=dict(env), start_new_session=True, preexec_fn=die_with_parent)
    log.info("vLLM started (pid %d); watching node ranks %s", child.pid,
             ", ".join(map(str, sorted(peers))))

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    in_main = threading.current_thread() is threading.main_thread()  # signals: main thread only
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    selector = selectors.DefaultSelector()
    last_seen = {rank: clock() for rank in peers}
    for rank, conn in peers.items():
        conn.setblocking(False)
        selector.register(conn, selectors.EVENT_READ, rank)
    next_beat = clock()
    try:
        while True:
            code = child.poll()
            if code is not None:
                log.info("vLLM exited with code %d", code)
                return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says
            now = clock()
            if now >= next_beat:
                for rank, conn in peers.items():
                    try:
                        conn.sendall(b"beat\n")
                    except OSError as error:
                        return _lost(child, rank, f"cannot reach it: {error}", grace_s)
                next_beat = now + heartbeat_s
            for key, _ in selector.select(timeout=min(heartbeat_s, 1.0)):
                rank = key.data
                try:
                    data = key.fileobj.recv(4096)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError as error:
                    return _lost(child, rank, f"connection error: {error}", grace_s)
                if not data:
                    return _lost(child, rank, "its launcher closed the connection", grace_s)
                last_seen[rank] = clock()
            now = clock()
            for rank, seen in last_seen.items():
                if now - seen > peer_timeout_s:
                    return _lost(child, rank, f"no heartbeat for {now - seen:.0f}s", grace_s)
    finally:
        selector.close()
        for conn in peers.values():
            conn.close()
        _stop(child, grace_s)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _lost(child: subprocess.Popen[bytes], rank: int, why: str, grace_s: float) -> int:
    who = "the leader (node rank 0)" if rank == 0 else f"node rank {rank}"
    log.error("lost %s of the group: %s; stopping vLLM so the group is recreated", who, why)
    _stop(child, grace_s)
    return EXIT_GROUP_LOST
