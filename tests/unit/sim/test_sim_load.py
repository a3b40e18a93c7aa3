"""The load generator: bounded, loopback-only, measuring TTFT like client-phase1.csv."""

from __future__ import annotations

import csv
import io

import pytest
from shardwise_runtime.sim import load, loopback
from sim_support import capture, serving


def test_percentile_interpolates_like_numpy() -> None:
    assert load.percentile([], 50) is None
    assert load.percentile([3.0], 95) == 3.0
    assert load.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert load.percentile(list(range(101)), 95) == pytest.approx(95.0)


def test_summary_ignores_failed_requests_for_latency() -> None:
    records = [
        load.RequestRecord(0, 8, 0.1, 0.3, 9, "u"),
        load.RequestRecord(1, 8, 0.3, 0.5, 9, "u"),
        load.RequestRecord(2, 8, None, 9.0, 0, "u", error="APITimeoutError: late"),
    ]
    summary = load.summarize(records)
    assert (summary.requests, summary.errors) == (3, 1)
    assert summary.ttft_p50_s == pytest.approx(0.2) and summary.e2e_p95_s == pytest.approx(0.49)


def test_csv_starts_with_the_captured_columns() -> None:
    out = io.StringIO()
    load.write_csv([load.RequestRecord(0, 8, 0.03, 0.1, 9, "u", 17, 8)], out)
    captured_header = capture("client-phase1.csv").splitlines()[0].split(",")
    header = out.getvalue().splitlines()[0].split(",")
    assert header[: len(captured_header)] == captured_header
    assert next(csv.DictReader(io.StringIO(out.getvalue())))["completion_tokens"] == "8"


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8000/v1",
        "http://example.com/v1",
        "ftp://127.0.0.1/v1",
        "http://[2001:db8::1]:8000/v1",
    ],
)
def test_non_loopback_targets_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        loopback.require_loopback_url(url)


@pytest.mark.parametrize(
    "url", ["http://127.1.2.3:8000/v1", "http://localhost:8000/v1", "http://[::1]:8000/v1"]
)
def test_loopback_targets_are_accepted(url: str) -> None:
    assert loopback.require_loopback_url(url) == url


@pytest.mark.anyio
async def test_run_load_refuses_before_sending() -> None:
    with pytest.raises(ValueError):
        await load.run_load(["http://192.0.2.1:8000/v1"], "tiny", rps=1, duration_s=1)


@pytest.mark.anyio
async def test_a_run_sends_rps_times_duration_and_measures_each() -> None:
    async with serving() as served:
        records = await load.run_load(
            [f"{served.url}/v1"], "tiny", rps=50, duration_s=0.2, max_tokens=[8, 16]
        )
    assert [r.request for r in records] == list(range(10))
    assert all(r.error is None for r in records)
    assert [r.chunks for r in records] == [9, 17] * 5  # role chunk + one per token, as captured
    assert all(
        r.client_ttft_s is not None and 0 < r.client_ttft_s < r.client_e2e_s for r in records
    )
    assert {r.completion_tokens for r in records} == {8, 16}


@pytest.mark.anyio
async def test_unreachable_targets_become_errors_not_crashes() -> None:
    async with serving() as served:
        url = f"{served.url}/v1"
    records = await load.run_load([url], "tiny", rps=20, duration_s=0.1, request_timeout_s=2)
    assert len(records) == 2 and all(r.error for r in records)


@pytest.mark.anyio
async def test_spreading_load_over_replicas_lowers_ttft() -> None:
    # One request at a time, about 0.1 s each (10 ms to the first token, 19 more at 5 ms): one
    # engine serves about 9.5 requests/s, so 14/s queues on one (the 14th waits ~0.45 s) and not
    # on two (7/s each, a request every 0.14 s). The margin is wide so a busy machine, which
    # slows both runs, cannot close it (it once did with 2 slots and 18/s for 0.6 s: 0.197 s
    # against 0.392 s).
    tight = {"max_concurrency": 1, "ttft_ms": 10.0, "itl_ms": 5.0}
    async with serving(**tight) as one, serving(**tight) as two:
        urls = [f"{one.url}/v1", f"{two.url}/v1"]
        alone = await load.run_load(urls[:1], "tiny", rps=14, duration_s=1.0, max_tokens=20)
        spread = await load.run_load(urls, "tiny", rps=14, duration_s=1.0, max_tokens=20)
    p95_alone = load.summarize(alone).ttft_p95_s
    p95_spread = load.summarize(spread).ttft_p95_s
    assert p95_alone is not None and p95_spread is not None
    assert p95_spread < 0.5 * p95_alone
    assert {r.target for r in spread} == set(urls)
