"""Forming a group over real localhost sockets, with short timeouts instead of sleeps."""

import socket
import threading

import pytest

from shardwise_runtime.launcher import rendezvous


def leader(nodes: int, timeout_s: float) -> tuple[int, threading.Thread, list[BaseException]]:
    server = rendezvous.listen(0)
    port = server.getsockname()[1]
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            rendezvous.wait_for_workers(server, nodes, timeout_s)
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    return port, thread, errors


def test_group_forms_when_every_worker_joins() -> None:
    port, thread, errors = leader(nodes=3, timeout_s=5.0)
    workers = [threading.Thread(target=rendezvous.join_leader,
                                args=("127.0.0.1", port, rank, 5.0)) for rank in (1, 2)]
    for worker in workers:
        worker.start()
    for t in (*workers, thread):
        t.join(timeout=10)
    assert errors == []
    assert not thread.is_alive()


def test_leader_names_the_worker_that_never_joined() -> None:
    port, thread, errors = leader(nodes=3, timeout_s=0.5)
    with pytest.raises(rendezvous.GroupTimeout, match="did not answer node rank 2"):
        rendezvous.join_leader("127.0.0.1", port, 2, 0.2)  # joins, then gives up waiting
    thread.join(timeout=10)
    assert [str(e) for e in errors] == [
        "worker never joined: 2 of 3 nodes after 0.5s (missing node ranks: 1)"]


def test_leader_ignores_nonsense_and_out_of_range_ranks() -> None:
    port, thread, errors = leader(nodes=2, timeout_s=0.5)
    for message in (b"hello\n", b"join 7\n"):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(message)
    thread.join(timeout=10)
    assert "missing node ranks: 1" in str(errors[0])


def test_worker_without_a_leader_times_out_with_the_address() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    naps: list[float] = []
    ticks = iter(range(100))
    with pytest.raises(rendezvous.GroupTimeout, match=f"127.0.0.1:{port} did not answer node "
                                                      "rank 1 within 3s"):
        rendezvous.join_leader("127.0.0.1", port, 1, 3.0, clock=lambda: float(next(ticks)),
                               sleep=naps.append)
    assert naps and all(n <= 2.0 for n in naps)
