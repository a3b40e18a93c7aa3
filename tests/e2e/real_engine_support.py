"""The real vLLM engine in tests: the cached install, a fleet that runs it, and a measuring client.

The engine comes from hack/install-vllm.sh (cached outside the clone; the first run installs it,
several minutes). Real-engine tests are few and slow by nature (vLLM needs about two minutes to
start on two cores), so every wait here is generous and bounded.
"""

from __future__ import annotations

import bisect
import dataclasses
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import openai
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process
from tests.e2e.support import ROOT

INSTALL_TIMEOUT_S = 3600
# vLLM 0.32's histogram bucket upper bounds (seconds), from its /metrics.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)


def install_real_engine() -> pathlib.Path:
    """The engine's folder (idempotent: a complete install returns at once)."""
    result = subprocess.run(["bash", str(ROOT / "hack/install-vllm.sh")], capture_output=True,
                            text=True, timeout=INSTALL_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"hack/install-vllm.sh failed:\n{result.stderr[-4000:]}")
    return pathlib.Path(result.stdout.strip().splitlines()[-1])


def start_fleet(cluster: LocalCluster, namespace: str, home: pathlib.Path) -> Process:
    log_dir = cluster.log_dir / f"real-{namespace}"
    process = Process(f"fleet-{namespace}", [
        sys.executable, "-m", "shardwise_runtime.sim.server", "fleet",
        "--kubeconfig", str(cluster.user_kubeconfig("shardwise-sim")), "--namespace", namespace,
        "--real-engine-home", str(home), "--log-dir", str(log_dir)],
        cluster.log_dir / f"fleet-{namespace}.log", env={"PYTHONUNBUFFERED": "1"})
    process.start()
    return process


def stop_fleet(process: Process) -> None:
    # The fleet stops its engines on SIGTERM (each gets a grace period): wait for that.
    process.stop(timeout=90)


@pytest.fixture
def real_fleet(cluster: LocalCluster, namespace: str) -> Iterator[Process]:
    """The fleet runner for the test's namespace, running the real vLLM CPU engine in its pods."""
    process = start_fleet(cluster, namespace, install_real_engine())
    try:
        yield process
    finally:
        stop_fleet(process)


def bucket_index(seconds: float, buckets: tuple[float, ...]) -> int:
    return bisect.bisect_left(buckets, seconds)


def within_one_bucket(a_s: float, b_s: float, buckets: tuple[float, ...]) -> bool:
    return abs(bucket_index(a_s, buckets) - bucket_index(b_s, buckets)) <= 1


# What the client's own clock adds on 2 busy cores (loopback, HTTP and JSON in a Python thread):
# tens of milliseconds, which spans two or three of vLLM's narrow low buckets (20 ms apart under
# 100 ms). A fresh-clone CI run saw status TTFT p95 36.7 ms beside the client's 72.5 ms.
CLIENT_SLACK_S = 0.05


def engine_agrees_with_client(engine_s: float, client_s: float, buckets: tuple[float, ...]) -> bool:
    """The engine's quantile (bucket-resolution) matches the client's within one bucket, or the
    client reads at most its own overhead more; a status off by a whole unit or a wrong metric
    still fails."""
    return within_one_bucket(engine_s, client_s, buckets) or 0 <= client_s - engine_s <= CLIENT_SLACK_S


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = int(rank), min(int(rank) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclasses.dataclass
class Streamed:
    start: float
    token_times: list[float]  # arrival of every chunk that carried a choice
    completion_tokens: int | None
    error: str | None = None


class ClosedLoopClient:
    """`concurrency` threads, each streaming chat requests through the official OpenAI client,
    recording when every chunk arrived; `think_s` is each thread's pause between requests (a user
    reading the answer), which leaves the 2-core host slack so that the client's own clock reads
    the engine's latency rather than CPU starvation of the client or vLLM's API front end."""

    def __init__(self, base_url: str, model: str, *, concurrency: int = 2, think_s: float = 0.0,
                 max_tokens: tuple[int, ...] = (8, 16, 32), timeout_s: float = 120.0) -> None:
        self.think_s = think_s
        self.client = openai.OpenAI(base_url=base_url, api_key="EMPTY", timeout=timeout_s, max_retries=0)
        self.model = model
        self.max_tokens = max_tokens
        self.results: list[Streamed] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                         for i in range(concurrency)]

    def one(self, max_tokens: int) -> Streamed:
        start = time.monotonic()
        times: list[float] = []
        usage = None
        try:
            stream = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "Tell me about GPUs."}],
                max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True})
            for chunk in stream:
                if chunk.choices:
                    times.append(time.monotonic())
                if chunk.usage is not None:
                    usage = chunk.usage.completion_tokens
        except openai.OpenAIError as error:
            return Streamed(start, times, usage, error=f"{type(error).__name__}: {error}")
        return Streamed(start, times, usage)

    def _loop(self, index: int) -> None:
        n = index
        while not self._stop.is_set():
            result = self.one(self.max_tokens[n % len(self.max_tokens)])
            n += 1
            with self._lock:
                self.results.append(result)
            self._stop.wait(self.think_s)

    def __enter__(self) -> "ClosedLoopClient":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)
        self.client.close()

    def snapshot(self) -> list[Streamed]:
        with self._lock:
            return list(self.results)


@dataclasses.dataclass(frozen=True)
class ClientFigures:
    requests: int
    errors: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    output_tokens_per_s: float


def figures(results: list[Streamed], since: float, until: float) -> ClientFigures:
    """Client-side figures over the requests that finished inside [since, until], the way the
    server's histograms count them (a request is observed when it finishes)."""
    done = [r for r in results if r.error is None and r.token_times and since <= r.token_times[-1] <= until]
    ttft = [r.token_times[0] - r.start for r in done]
    itl = [b - a for r in done for a, b in zip(r.token_times[1:], r.token_times[2:])]
    tokens = sum(1 for r in results for t in r.token_times[1:] if since <= t <= until)
    return ClientFigures(
        requests=len(done), errors=sum(1 for r in results if r.error),
        ttft_p50_s=percentile(ttft, 50), ttft_p95_s=percentile(ttft, 95),
        itl_p50_s=percentile(itl, 50), itl_p95_s=percentile(itl, 95),
        output_tokens_per_s=tokens / max(until - since, 1e-9))


def iter_poll(timeout_s: float, interval_s: float) -> Iterator[float]:
    """Yields the elapsed seconds every interval until timeout (bounded polling, no bare sleeps)."""
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < timeout_s:
        yield elapsed
        time.sleep(interval_s)
