"""The work queue's client-go semantics, single-threaded where possible, one real thread race."""

import threading

from shardwise.kube.workqueue import HIGH, LOW, NORMAL, Backoff, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_repeated_adds_collapse_and_order_is_kept() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "c", "b"):
        q.add(key)
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["a", "b", "c"]
    assert q.get(timeout=0) is None


def test_a_key_being_processed_is_not_handed_out_again_but_runs_once_more_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    q.add("a")
    assert q.get(timeout=0) is None  # still processing: a second worker must not get it
    q.done("a")
    assert q.get(timeout=0) == "a"  # the adds made meanwhile collapse into one more run
    q.done("a")
    assert q.get(timeout=0) is None and q.pending() == 0


def test_add_after_waits_for_its_time_and_collapses_with_a_queued_key() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 5.0)
    assert q.get(timeout=0) is None
    clock.now = 5.0
    assert q.get(timeout=0) == "a"
    q.done("a")
    q.add("b")
    q.add_after("b", 1.0)
    clock.now = 7.0
    assert q.get(timeout=0) == "b"
    q.done("b")
    assert q.get(timeout=0) is None


def test_higher_priorities_go_first_fifo_within_one() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("bulk-1", LOW)
    q.add("new-1")
    q.add("ready-1", HIGH)
    q.add("bulk-2", LOW)
    q.add("new-2", NORMAL)
    q.add("ready-2", HIGH)
    assert [q.get(timeout=0) for _ in range(6)] == ["ready-1", "ready-2", "new-1", "new-2", "bulk-1", "bulk-2"]
    assert len(q) == 0


def test_adding_a_waiting_key_raises_its_priority_but_never_lowers_it() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key, LOW)
    q.add("c", HIGH)  # raised: jumps the line, and is handed out once
    q.add("a", LOW)
    q.add("b", LOW)
    assert len(q) == 3
    assert q.get(timeout=0) == "c"
    q.add("a", HIGH)
    q.add("a", LOW)  # does not undo the raise
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["a", "b", None]


def test_a_key_re_added_while_processing_keeps_the_highest_priority_it_was_given() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a", LOW)
    q.add("a", HIGH)
    q.add("b", NORMAL)
    assert q.get(timeout=0) == "b"  # "a" is still being processed
    q.done("a")
    q.add("c", NORMAL)
    assert q.get(timeout=0) == "a"  # queued again on done, at HIGH: before "c"
    q.done("a")
    q.done("b")
    assert q.get(timeout=0) == "c"
    q.done("c")
    assert q.pending() == 0


def test_a_delayed_add_keeps_its_priority() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("new")
    q.add_after("ready", 1.0, HIGH)
    clock.now = 1.0
    assert [q.get(timeout=0), q.get(timeout=0)] == ["ready", "new"]


def test_a_burst_of_delayed_adds_is_one_add_at_the_soonest_time() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 0.5)
    clock.now = 0.3
    q.add_after("a", 0.5)  # due at 0.8: the pending one at 0.5 stays
    q.add_after("b", 5.0)
    q.add_after("b", 1.0)  # sooner: replaces the one at 5.0
    assert q.pending() == 2
    clock.now = 0.5
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now = 1.3
    assert q.get(timeout=0) == "b"
    q.done("b")
    clock.now = 10.0
    assert q.get(timeout=0) is None and q.pending() == 0  # nothing left of the replaced or collapsed adds


def test_backoff_grows_per_key_is_capped_jittered_and_forgotten() -> None:
    backoff: Backoff[str] = Backoff(base=0.01, cap=1.0, jitter=0.1, rand=lambda: 1.0)
    delays = [backoff.when("a") for _ in range(10)]
    assert delays[:3] == [0.01 * 1.1, 0.02 * 1.1, 0.04 * 1.1]
    assert max(delays) == 1.0 * 1.1  # the cap, plus at most the jitter
    assert backoff.when("b") == 0.01 * 1.1  # other keys are not slowed
    backoff.forget("a")
    assert backoff.when("a") == 0.01 * 1.1


def test_workers_never_process_one_key_at_once() -> None:
    q: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    overlaps: list[int] = []
    guard = threading.Lock()
    processed = [0]

    def worker() -> None:
        while True:
            key = q.get(timeout=0.5)
            if key is None:
                return
            with guard:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            for _ in range(200):
                pass
            with guard:
                active.discard(key)
                processed[0] += 1
            q.done(key)

    for i in range(2000):
        q.add(i % 7)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(2000):
        q.add(i % 7)
    for t in threads:
        t.join()
    assert overlaps == []
    assert 7 <= processed[0] <= 4000 and q.pending() == 0


def test_the_first_retry_of_a_failure_is_not_hot() -> None:
    backoff: Backoff[str] = Backoff(rand=lambda: 0.0)
    assert backoff.when("a") >= 0.1
