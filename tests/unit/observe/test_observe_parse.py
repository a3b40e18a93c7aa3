"""parse(): the real vLLM 0.32 capture, multiple engines, and inputs that must be refused."""

from __future__ import annotations

import math

import pytest
from observe_builders import CAPTURES

from shardwise.observe import parse


def test_real_capture_has_the_figures_visible_in_the_text(t1_text: str) -> None:
    s = parse.parse(t1_text)
    assert s.model_name == "tiny"
    # Counters keep their exposed `_total` names; request_success is summed over finished_reason.
    assert s.counters == {
        parse.REQUESTS: 43.0,
        parse.PROMPT_TOKENS: 1610.0,
        parse.OUTPUT_TOKENS: 774.0,
    }
    assert s.gauges == {parse.RUNNING: 0.0, parse.WAITING: 0.0, parse.KV_CACHE_USAGE: 0.0}
    ttft = s.histograms[parse.TTFT]
    assert ttft.count == 43.0 and ttft.sum == pytest.approx(1.0925624370574951)
    assert dict(ttft.buckets)[0.02] == 9.0 and dict(ttft.buckets)[0.04] == 40.0
    assert math.isinf(ttft.buckets[-1][0]) and len(ttft.buckets) == 23
    assert [b for b, _ in ttft.buckets] == sorted(b for b, _ in ttft.buckets)
    assert s.histograms[parse.ITL].count == 731.0
    # `_created` arrives as separate gauges named without `_total`; keyed back to the series.
    assert s.created[parse.PROMPT_TOKENS] == pytest.approx(1.7960454198337467e09)
    assert s.created[parse.REQUESTS] == pytest.approx(1.7960454198341618e09)  # earliest reason
    assert set(s.created) == set(parse.HISTOGRAMS + parse.COUNTERS)


def test_fresh_server_capture_parses_with_zero_counts(t0_text: str) -> None:
    # metrics-before-load.txt is the same process before any request was counted.
    s = parse.parse((CAPTURES / "metrics-before-load.txt").read_text())
    assert set(s.counters.values()) == {0.0}
    assert s.histograms[parse.TTFT].count == 0.0
    assert s.created == parse.parse(t0_text).created


def _second_engine(text: str) -> str:
    extra = [
        line.replace('engine="0"', 'engine="1"')
        for line in text.splitlines()
        if line.startswith("vllm:") and 'engine="0"' in line
    ]
    return text + "\n".join(extra) + "\n"


def test_engines_are_summed_and_the_earliest_created_kept(t1_text: str) -> None:
    one = parse.parse(t1_text)
    two = parse.parse(_second_engine(t1_text))
    assert two.counters == {k: 2 * v for k, v in one.counters.items()}
    assert two.histograms[parse.TTFT].buckets == tuple(
        (b, 2 * c) for b, c in one.histograms[parse.TTFT].buckets
    )
    assert two.created == one.created
    for gauge in (parse.RUNNING, parse.WAITING):
        assert two.gauges[gauge] == 2 * one.gauges[gauge]
    assert two.gauges[parse.KV_CACHE_USAGE] == one.gauges[parse.KV_CACHE_USAGE], "a fraction: the engines' mean"


def test_the_kv_cache_usage_of_a_pod_is_the_mean_of_its_engines(t1_text: str) -> None:
    text = _second_engine(t1_text)
    kv = [line for line in text.splitlines() if line.startswith(parse.KV_CACHE_USAGE + "{")]
    assert len(kv) == 2
    lines = [line for line in text.splitlines() if line not in kv]
    lines += [kv[0].rsplit(" ", 1)[0] + " 0.9", kv[1].rsplit(" ", 1)[0] + " 0.5"]
    assert parse.parse("\n".join(lines) + "\n").gauges[parse.KV_CACHE_USAGE] == pytest.approx(0.7)


def test_created_series_are_optional(t1_text: str) -> None:
    # prometheus_client can be told not to expose `_created` (PROMETHEUS_DISABLE_CREATED_SERIES)
    without = "\n".join(line for line in t1_text.splitlines() if "_created" not in line)
    s = parse.parse(without)
    assert s.created == {} and s.counters[parse.REQUESTS] == 43.0


@pytest.mark.parametrize(
    ("text", "error", "words"),
    [
        ("<html><body>502 Bad Gateway</body></html>\n", parse.NotPrometheusText, "not Prometheus"),
        ('{"detail": "Not Found"}\n', parse.NotPrometheusText, "not Prometheus"),
        ("", parse.NotVllmMetrics, "no vLLM series"),
        ("# TYPE up gauge\nup 1\n", parse.NotVllmMetrics, "no vLLM series"),
        ('vllm:num_requests_running{engine="0"} 1\n', parse.NotVllmMetrics, "missing"),
    ],
)
def test_unusable_bodies_are_refused_with_a_clear_type(
    text: str, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        parse.parse(text)


def test_a_missing_series_is_named(t1_text: str) -> None:
    text = "\n".join(line for line in t1_text.splitlines() if "inter_token" not in line)
    with pytest.raises(parse.NotVllmMetrics, match="vllm:inter_token_latency_seconds"):
        parse.parse(text)


def test_histogram_without_inf_bucket_is_refused(t1_text: str) -> None:
    text = "\n".join(
        line for line in t1_text.splitlines()
        if not (line.startswith("vllm:time_to_first_token_seconds_bucket") and "+Inf" in line)
    )
    with pytest.raises(parse.NotVllmMetrics, match="Inf"):
        parse.parse(text)


def test_garbage_inside_a_wanted_line_is_not_prometheus_text(t1_text: str) -> None:
    text = t1_text.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="tiny"} zero',
    )
    with pytest.raises(parse.NotPrometheusText):
        parse.parse(text)


def test_error_message_is_one_short_line() -> None:
    with pytest.raises(parse.NotPrometheusText) as info:
        parse.parse("<html>\n" + "x" * 500 + "\n</html>")
    assert "\n" not in str(info.value) and len(str(info.value)) <= 120


def test_lines_outside_the_plain_shape_parse_the_same(t1_text: str) -> None:
    # An escaped quote in a label, or a trailing timestamp, takes a line off parse.py's fast
    # split and through prometheus_client's parser; the numbers must not change.
    escaped = t1_text.replace('model_name="tiny"', 'model_name="ti\\"ny"')
    timestamped = "\n".join(
        line + " 1796045440000" if line.startswith("vllm:") else line
        for line in t1_text.splitlines()
    )
    plain = parse.parse(t1_text)
    for text, model in ((escaped, 'ti"ny'), (timestamped, "tiny")):
        other = parse.parse(text)
        assert other.model_name == model
        assert (other.histograms, other.counters, other.gauges, other.created) == (
            plain.histograms, plain.counters, plain.gauges, plain.created
        )
