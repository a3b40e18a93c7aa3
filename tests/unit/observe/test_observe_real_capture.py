"""The figures for the real vLLM 0.32 load phase (metrics-t0 -> metrics-t1), checked by hand.

The load: 40 streaming chat requests, concurrency 2, max_tokens cycling 8/16/32 with
ignore_eos, so 736 output tokens in all (the sum of max_tokens in client-phase1.csv).
Expected quantiles are computed here from the bucket lines of the two files, copied below, by
walking the observations of the bucket the rank lands in: no code shared with aggregate.py.
"""

from __future__ import annotations

import csv
import json

import pytest
from observe_builders import CAPTURES

from shardwise.observe import aggregate, cli, parse

# (upper bound, cumulative count at t0, cumulative count at t1), copied from the files; the
# buckets not listed hold the same count as the last listed one below them in both files.
TTFT = [(0.01, 0, 0), (0.02, 2, 9), (0.04, 2, 40), (0.06, 3, 43)]
ITL = [(0.01, 33, 612), (0.025, 35, 729), (0.05, 35, 731)]
E2E = [(0.3, 3, 32), (0.5, 3, 43)]
QUEUE = [(0.3, 3, 43)]


def _expected_ms(rows: list[tuple[float, int, int]], q: float) -> float:
    """Walk the observations bucket by bucket; interpolate inside the one holding rank q*n."""
    cumulative = [(bound, t1 - t0) for bound, t0, t1 in rows]  # increase of each `le` line
    total = cumulative[-1][1]
    rank = q * total
    lower, below = 0.0, 0
    for bound, upto in cumulative:
        inside = upto - below  # observations in (lower, bound]
        if inside and upto >= rank:
            return 1000 * (lower + (bound - lower) * (rank - below) / inside)
        lower, below = bound, upto
    raise AssertionError("rank beyond the listed buckets")


def test_hand_computation_agrees_with_itself_on_simple_numbers() -> None:
    # TTFT increases: 7 in (0.01, 0.02], 31 in (0.02, 0.04], 2 in (0.04, 0.06]. The p50 is
    # rank 20, the 13th of the 31 observations in (0.02, 0.04]: 20 + 20 * 13/31 ms.
    assert _expected_ms(TTFT, 0.5) == pytest.approx(20 + 20 * 13 / 31)


def _run_cli(capsys: pytest.CaptureFixture[str]) -> dict[str, float]:
    code = cli.main([
        "metrics", "summarize",
        "--before", str(CAPTURES / "metrics-t0.txt"),
        "--after", str(CAPTURES / "metrics-t1.txt"),
        "-o", "json",
    ])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out.count("\n") == 1  # one JSON object on one line
    return json.loads(out)


def test_cli_figures_match_the_hand_computation(capsys: pytest.CaptureFixture[str]) -> None:
    got = _run_cli(capsys)
    assert list(got) == [
        "requests", "promptTokens", "outputTokens", "ttftP50Ms", "ttftP95Ms", "ttftP99Ms",
        "itlP50Ms", "itlP95Ms", "e2eP95Ms", "queueP95Ms",
    ]
    # Counters: 43 - 3 requests, 1610 - 60 prompt tokens, 774 - 38 output tokens.
    assert (got["requests"], got["promptTokens"], got["outputTokens"]) == (40, 1550, 736)
    expected = {
        "ttftP50Ms": _expected_ms(TTFT, 0.50),   # 28.387
        "ttftP95Ms": _expected_ms(TTFT, 0.95),   # 40.0: rank 38 is the last of le=0.04
        "ttftP99Ms": _expected_ms(TTFT, 0.99),   # 56.0
        "itlP50Ms": _expected_ms(ITL, 0.50),     # 6.010
        "itlP95Ms": _expected_ms(ITL, 0.95),     # 20.72
        "e2eP95Ms": _expected_ms(E2E, 0.95),     # 463.6
        # 285: every queue time is in vLLM's lowest bucket (0, 0.3 s], so PromQL can only
        # interpolate inside it; the real mean is ~0.02 ms (sum / count). A resolution limit.
        "queueP95Ms": _expected_ms(QUEUE, 0.95),
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=0.001), key
    assert got["ttftP95Ms"] == pytest.approx(40.0) and got["queueP95Ms"] == pytest.approx(285.0)


def test_server_ttft_agrees_with_the_client_within_bucket_resolution() -> None:
    """The client measures time to the first content chunk, which adds HTTP and SSE framing to
    vLLM's own TTFT, so the client should see slightly *more*. Compare like with like: put the
    client's 40 measurements into vLLM's buckets and take the same PromQL quantile of both."""
    rows = list(csv.DictReader((CAPTURES / "client-phase1.csv").open()))
    client = [float(r["client_ttft_s"]) for r in rows]
    assert len(client) == 40
    before = parse.parse((CAPTURES / "metrics-t0.txt").read_text())
    after = parse.parse((CAPTURES / "metrics-t1.txt").read_text())
    server = aggregate.delta(before, after).histograms[parse.TTFT]
    assert server.count == len(client)  # the same 40 requests

    client_buckets = [(b, float(sum(t <= b for t in client))) for b, _ in server.buckets]
    server_cdf = dict(server.buckets)
    # At every bucket boundary, no more client requests than server requests are "done" by then.
    for bound, done in client_buckets:
        assert done <= server_cdf[bound], bound

    server_p95 = aggregate.histogram_quantile(0.95, server.buckets)
    client_p95 = aggregate.histogram_quantile(0.95, client_buckets)
    bounds = [b for b, _ in server.buckets]
    width = next(b for b in bounds if b >= server_p95) - max(b for b in bounds if b < server_p95)
    assert server_p95 <= client_p95 <= server_p95 + width  # 40 ms <= 50 ms <= 40 + 20 ms

    # And the overhead itself is small and positive: mean client TTFT vs vLLM's sum / count.
    overhead = sum(client) / len(client) - server.sum / server.count
    assert 0 < overhead < 0.02


def test_queue_mean_tells_the_truth_the_coarse_p95_cannot() -> None:
    # _sum and _count of vllm:request_queue_time_seconds, copied from the two files.
    expected_ms = (0.0007770189996563204 - 0.00011766499994791957) / (43 - 3) * 1000
    before = parse.parse((CAPTURES / "metrics-t0.txt").read_text())
    after = parse.parse((CAPTURES / "metrics-t1.txt").read_text())
    summary = aggregate.summarize([aggregate.delta(before, after)], 300.0, [])
    assert summary.queue_mean_ms == pytest.approx(expected_ms)  # ~0.016 ms
    assert summary.queue_p95_ms == pytest.approx(285.0)  # interpolated inside the 0-300 ms bucket


def test_load_gauges_reads_the_filtered_scrape_parse_refuses() -> None:
    filtered = (CAPTURES / "metrics-filtered.txt").read_text()
    with pytest.raises(parse.NotVllmMetrics):
        parse.parse(filtered)  # no histograms: not a scrape the collector can use
    assert parse.load_gauges(filtered) == {parse.WAITING: 0.0, parse.KV_CACHE_USAGE: 0.0}


def test_load_gauges_adds_queues_and_averages_kv_cache_over_a_pods_engines() -> None:
    text = "\n".join([
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0',
        'vllm:num_requests_waiting{engine="1",model_name="m"} 5.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2',
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6',
        'vllm:num_requests_running{engine="0",model_name="m"} NaN',  # implausible: left out
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9.0',
    ])
    assert parse.load_gauges(text) == {parse.WAITING: 7.0, parse.KV_CACHE_USAGE: pytest.approx(0.4)}
