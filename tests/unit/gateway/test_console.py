"""The console page: status figures in, HTML with those numbers out; history; per-key rows."""

from __future__ import annotations

import html.parser

from shardwise.gateway.console import page as console

INFD = {
    "metadata": {"namespace": "default", "name": "llama-8b"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
    "status": {
        "phase": "Ready", "readyReplicas": 2, "desiredReplicas": 3, "replicas": 2,
        "plan": {"tensorParallel": 2, "pipelineParallel": 1, "gpuProduct": "NVIDIA-L40S", "reason": "long text"},
        "latency": {"ttftP50Ms": 51.9, "ttftP95Ms": 87.7, "itlP50Ms": 14.8, "itlP95Ms": 24.9,
                    "outputTokensPerSecond": 99, "requestsPerSecond": 6.2},
        "cost": {"hourlyUSD": 4.0, "perMillionOutputTokensUSD": 11.2},
        "conditions": [{"type": "SLOMet", "status": "False", "reason": "SLOBreached",
                        "message": "TTFT p95 812 ms > SLO 500 ms"}],
    },
}


class _Fields(html.parser.HTMLParser):
    """data-field -> data-value of every element, per row (data-deployment / data-key)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.row = ""
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if "data-deployment" in a or "data-key" in a or "data-endpoint" in a:
            self.row = a.get("data-deployment") or (f"engine:{a['data-endpoint']}" if "data-endpoint" in a
                                                    else f"key:{a.get('data-key')}")
        if "data-field" in a and "data-value" in a:
            self.rows.setdefault(self.row, {})[a["data-field"] or ""] = a["data-value"] or ""


def _parse(page: str) -> _Fields:
    parser = _Fields()
    parser.feed(page)
    return parser


def _view(**kw: object) -> console.View:
    fig = console.figures(INFD)
    return console.View(models=[console.ModelView("default", "llama-8b", "llama-8b", fig)], **kw)  # type: ignore[arg-type]


def test_the_page_shows_the_status_numbers_in_the_html() -> None:
    page = console.render(_view(generated_at="now"))
    row = _parse(page).rows["default/llama-8b"]
    assert row == {"phase": "Ready", "ttftP50Ms": "51.9", "ttftP95Ms": "87.7", "itlP50Ms": "14.8",
                   "itlP95Ms": "24.9", "outputTokensPerSecond": "99", "readyReplicas": "2", "desiredReplicas": "3",
                   "layout": "TP2 x PP1", "hourlyUSD": "4", "perMillionOutputTokensUSD": "11.2", "slo": "missed"}
    assert "TTFT p95 812 ms &gt; SLO 500 ms" in page
    assert "NVIDIA-L40S" in page and "long text" not in page  # only the figures travel


def test_absent_figures_are_a_dash_not_zero() -> None:
    bare = {"metadata": {"namespace": "a", "name": "b"}, "spec": {}, "status": {"phase": "Pending"}}
    page = console.render(console.View(models=[console.ModelView("a", "b", "b", console.figures(bare))]))
    row = _parse(page).rows["a/b"]
    assert "ttftP95Ms" not in row and row["slo"] == "none" and row["phase"] == "Pending"


def test_it_refreshes_with_javascript_and_says_reload_without() -> None:
    page = console.render(_view(refresh_s=7))
    assert _parse(page).scripts == 1 and "7*1000" in page and "<noscript>" in page
    assert 'id="live"' in page


def test_history_keeps_changes_and_one_point_a_minute_for_an_hour() -> None:
    h = console.History()
    fig = console.figures(INFD)
    for t in range(0, 7200, 10):  # same figures every 10 s for two hours
        h.record("m", float(t), fig)
    points = h.series("m")
    assert 55 <= len(points) <= 62 and points[-1].t - points[0].t <= 3600
    h.record("m", 7200.0, {**fig, "ttftP95Ms": 500})
    assert h.series("m")[-1].values["ttftP95Ms"] == 500
    h.forget_except([])
    assert h.series("m") == []


def test_sparkline_draws_the_last_hour() -> None:
    points = [console.Point(float(t), {"ttftP95Ms": float(t % 7)}) for t in range(0, 600, 60)]
    svg = console.sparkline(points, "ttftP95Ms")
    assert svg.count("polyline") == 1 and "over 9 min" in svg
    assert "not enough points" in console.sparkline(points[:1], "ttftP95Ms")


def test_keys_section_notes_keys_off_or_renders_rows() -> None:
    assert "API keys are not enabled" in console.render(_view())
    samples = [
        ("shardwise_gateway_key_requests_total", {"key": "ml/alice", "model": "m", "code": "200"}, 8.0),
        ("shardwise_gateway_key_requests_total", {"key": "ml/alice", "model": "m", "code": "429"}, 2.0),
        ("shardwise_gateway_key_tokens_total", {"key": "ml/alice", "direction": "completion"}, 300.0),
        ("shardwise_gateway_key_cost_usd_total", {"key": "ml/alice"}, 0.0123),
        ("shardwise_gateway_rate_limited_total", {"key": "ml/alice", "limit": "tokens"}, 2.0),
        ("shardwise_gateway_requests_total", {"model": "m", "code": "200"}, 99.0),
    ]
    rows = console.key_rows(samples)
    assert [r.key for r in rows] == ["ml/alice"] and rows[0].requests == 10 and rows[0].rejected == 2
    page = console.render(_view(keys=rows, keys_enabled=True))
    fields = _parse(page).rows["key:ml/alice"]
    assert fields["requests"] == "10" and fields["rejected"] == "2" and fields["completionTokens"] == "300"
    assert "tokens: 2" in page
    assert "No request with an API key yet" in console.render(_view(keys_enabled=True))


def test_engines_are_named_as_the_response_header_names_them() -> None:
    from shardwise.gateway.console import web as consoleweb
    from shardwise.gateway.service import observer

    assert "No response from an engine" in console.render(_view())
    seen = {"model": "llama-8b", "key_id": None, "code": "200", "complete": True, "ttft_s": 0.1, "e2e_s": 0.2,
            "events": None, "usage": None}
    record = observer.Observer().record
    for endpoint in ("10.9.0.1:8000", "10.9.0.1:8000", "10.9.0.2:8000"):
        record(observer.Observation(**seen, endpoint=endpoint))
    record(observer.Observation(**seen))  # no engine named: not a row
    rows = [r for r in console.engine_rows(consoleweb._served_samples()) if r.endpoint.startswith("10.9.0.")]
    assert [(r.model, r.endpoint, r.requests) for r in rows] == [("llama-8b", "10.9.0.1:8000", 2),
                                                                  ("llama-8b", "10.9.0.2:8000", 1)]
    page = console.render(_view(engines=rows))
    fields = _parse(page).rows["engine:10.9.0.1:8000"]
    assert fields == {"x-gateway-destination-endpoint-served": "10.9.0.1:8000", "requests": "2"}
    assert "<th>x-gateway-destination-endpoint-served</th>" in page


def test_names_are_escaped() -> None:
    evil = {**INFD, "spec": {"model": {"name": "<script>x</script>"}}}
    page = console.render(console.View(models=[console.ModelView("n", "m", "m", console.figures(evil))]))
    assert "<script>x" not in page


def test_the_shell_reads_the_gateways_slim_informer_objects() -> None:
    import types

    from shardwise.gateway.console import web as consoleweb
    from shardwise.gateway.service import server

    slim = server.slim_infd(INFD)
    informer = types.SimpleNamespace(items=lambda: [slim])
    gateway = types.SimpleNamespace(infds=[informer], settings=server.Settings())
    clock = iter(float(t) for t in range(0, 10_000, 30))
    page = consoleweb.Console(gateway, clock=lambda: next(clock))  # type: ignore[arg-type]
    view = page.view()
    assert view.models[0].figures["ttftP95Ms"] == 87.7 and view.keys_enabled is False
    row = _parse(console.render(view)).rows["default/llama-8b"]
    assert row["readyReplicas"] == "2" and row["hourlyUSD"] == "4"
