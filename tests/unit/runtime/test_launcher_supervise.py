"""Group supervision with real processes and real sockets: a lost peer stops vLLM (here `sleep`)."""

import pathlib
import socket
import sys
import threading
import time

from shardwise_runtime.launcher import supervise

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair()


def _run(argv: list[str], peers: dict[int, socket.socket], **kwargs: float) -> tuple[int, float]:
    start = time.monotonic()
    code = supervise.run_group(argv, {"PATH": "/usr/bin:/bin"}, peers, grace_s=5.0, **kwargs)
    return code, time.monotonic() - start


def test_a_peer_that_closes_its_connection_stops_vllm_with_exit_68() -> None:
    mine, theirs = _pair()
    threading.Timer(0.5, theirs.close).start()
    code, took = _run(SLEEPER, {1: mine}, heartbeat_s=0.2)
    assert code == supervise.EXIT_GROUP_LOST
    assert took < 30  # far less than the sleeper's 120 s: it was stopped, not waited for


def test_a_silent_peer_is_lost_after_the_peer_timeout() -> None:
    mine, theirs = _pair()  # `theirs` stays open but never writes: a vanished node
    try:
        code, took = _run(SLEEPER, {0: mine}, heartbeat_s=0.2, peer_timeout_s=1.0)
    finally:
        theirs.close()
    assert code == supervise.EXIT_GROUP_LOST
    assert 1.0 <= took < 30


def test_vllm_exiting_by_itself_gives_its_code_and_tells_the_peers() -> None:
    mine, theirs = _pair()
    code, _ = _run([sys.executable, "-c", "raise SystemExit(3)"], {1: mine}, heartbeat_s=0.2)
    assert code == 3
    theirs.settimeout(5)
    while theirs.recv(4096):  # heartbeats, then end of stream: the peer learns it is over
        pass
    theirs.close()


def test_two_supervisors_keep_each_other_alive_while_both_run() -> None:
    a, b = _pair()
    results: dict[str, int] = {}
    short = [sys.executable, "-c", "import time; time.sleep(2)"]
    # The worker's vLLM runs 2 s and exits 0; its leader must not count it lost before that
    # (heartbeats flow), and must then see the connection close.
    worker = threading.Thread(target=lambda: results.setdefault("worker", _run(short, {0: b}, heartbeat_s=0.2, peer_timeout_s=1.5)[0]))
    worker.start()
    code, _ = _run(SLEEPER, {1: a}, heartbeat_s=0.2, peer_timeout_s=1.5)
    worker.join(30)
    assert results["worker"] == 0
    assert code == supervise.EXIT_GROUP_LOST


def test_the_whole_session_of_vllm_is_stopped(tmp_path: pathlib.Path) -> None:
    """vLLM forks engine-core and worker processes: the grandchild must die with it."""
    pid_file = tmp_path / "grandchild.pid"
    script = (f"import pathlib, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(120)']); pathlib.Path({str(pid_file)!r}).write_text(str(p.pid)); "
              "time.sleep(120)")
    mine, theirs = _pair()
    closer = threading.Thread(target=lambda: (_wait_for(pid_file), theirs.close()))
    closer.start()
    code, _ = _run([sys.executable, "-c", script], {1: mine}, heartbeat_s=0.2)
    closer.join(30)
    assert code == supervise.EXIT_GROUP_LOST
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def _wait_for(path: pathlib.Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
