"""The event sink posts from its own thread, drops past its bound, retries only what may pass."""

import threading

from kubernetes.client import ApiException

from shardwise.kube.events import EventSink


def event(reason: str) -> dict:
    return {"reason": reason, "metadata": {"name": reason}}


def run_until_drained(sink: EventSink) -> None:
    stop = threading.Event()
    stop.set()  # already stopping: posts what is queued, then returns
    sink.run(stop, drain_s=30.0)


def test_events_are_posted_in_order_after_the_caller_moved_on() -> None:
    posted: list[str] = []
    sink = EventSink(lambda e: posted.append(e["reason"]))
    for reason in ("Planned", "Ready"):
        sink(event(reason))
    assert posted == [] and sink.pending() == 2  # handing over posts nothing yet
    run_until_drained(sink)
    assert posted == ["Planned", "Ready"]


def test_past_its_capacity_events_are_dropped_and_counted() -> None:
    sink = EventSink(lambda e: None, capacity=2)
    for i in range(5):
        sink(event(f"e{i}"))
    assert sink.pending() == 2 and sink.dropped == 3


def test_a_refused_event_is_not_retried_but_an_unavailable_server_is() -> None:
    attempts: dict[str, int] = {}

    def post(e: dict) -> None:
        attempts[e["reason"]] = attempts.get(e["reason"], 0) + 1
        if e["reason"] == "Forbidden":
            raise ApiException(status=403, reason="Forbidden")
        if attempts[e["reason"]] < 3:
            raise ApiException(status=503, reason="Service Unavailable")

    sink = EventSink(post)
    sink(event("Forbidden"))
    sink(event("Flaky"))
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, args=(stop,), daemon=True)
    worker.start()
    deadline = threading.Event()
    for _ in range(100):  # bounded: the two retries back off 0.5 s and 1 s
        if attempts.get("Flaky") == 3:
            break
        deadline.wait(0.1)
    stop.set()
    worker.join(timeout=30)
    assert attempts == {"Forbidden": 1, "Flaky": 3}
