"""The probe endpoints over real HTTP, as the kubelet calls them."""

import threading
import urllib.error
import urllib.request

from shardwise.kube import health
from shardwise.devcluster.processes import free_port


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_liveness_and_readiness_answer_plain_text_and_fail_with_the_reason() -> None:
    now = [0.0]
    contact = health.ApiContact(clock=lambda: now[0])
    synced, state = [False], ["unknown"]
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    threads: list[threading.Thread] = []
    port = free_port()
    server = health.serve(port, {"/healthz": health.liveness(contact, 60, lambda: threads),
                                 "/readyz": health.readiness(lambda: synced[0], lambda: state[0])}, host="127.0.0.1")
    try:
        assert fetch(port, "/healthz") == (200, "ok\n")
        assert fetch(port, "/readyz") == (503, "caches not synced\n")
        synced[0] = True
        code, text = fetch(port, "/readyz")
        assert code == 503 and "out of touch" in text
        state[0] = "standby"
        assert fetch(port, "/readyz") == (200, "ok\n")
        contact.mark(True)
        now[0] = 61.0
        code, text = fetch(port, "/healthz")
        assert code == 503 and "unreachable for 61 s" in text
        contact.mark(True)
        assert fetch(port, "/healthz")[0] == 200
        threads.append(worker)
        code, text = fetch(port, "/healthz")
        assert code == 503 and "threads stopped" in text
        assert fetch(port, "/nope")[0] == 404
    finally:
        server.shutdown()
