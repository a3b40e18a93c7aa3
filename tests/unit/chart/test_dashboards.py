"""The Grafana dashboards: in the chart as a ConfigMap for the sidecar, every query valid PromQL
(promtool) over series that really exist (the real vLLM capture, the operator's and the gateway's
registries)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import prometheus_client
import pytest
import yaml
from chart_support import ROOT, find
from prometheus_client.parser import text_string_to_metric_families

import shardwise.controller.manager  # noqa: F401  (registers the manager's series on the operator's registry)
from shardwise.gateway import metrics as gateway_metrics
from shardwise.observe import operator_metrics
from tests import alerting, promtool

Render = Callable[..., list[dict[str, Any]]]
CAPTURE = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu" / "metrics-t1.txt"


def _exported(registry: prometheus_client.CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
                    "summary": ("_count", "_sum", "_created")}.get(family.type, ("",))
        names |= {family.name + s for s in suffixes}
    return names


def known_metrics() -> set[str]:
    names = {s.name for f in text_string_to_metric_families(CAPTURE.read_text()) for s in f.samples}
    operator_metrics.publish_status("lint", "all", {
        "latency": {k: 1.0 for k in ("ttftP50Ms", "ttftP95Ms", "ttftP99Ms", "itlP50Ms", "itlP95Ms", "e2eP95Ms",
                                     "queueP95Ms", "requestsPerSecond", "promptTokensPerSecond",
                                     "outputTokensPerSecond", "running", "waiting", "kvCacheUsage")},
        "cost": {"hourlyUSD": 1.0, "perMillionOutputTokensUSD": 1.0}, "replicas": 1, "readyReplicas": 1,
        "plan": {"tensorParallel": 1, "pipelineParallel": 1}, "phase": "Ready",
        "conditions": [{"type": "Ready", "status": "True"}], "modelCache": {"bytesDone": 1, "bytesTotal": 1}})
    try:
        names |= _exported(operator_metrics.REGISTRY) | _exported(gateway_metrics.REGISTRY)
    finally:
        operator_metrics.forget("lint", "all")
    return names


def test_every_query_selects_series_that_exist() -> None:
    known = known_metrics()
    assert "vllm:time_to_first_token_seconds_bucket" in known and "shardwise_leader" in known
    queries = [*alerting.panel_queries(), *alerting.variable_queries()]
    assert len(queries) > 40
    unknown = {(board, title, name) for board, title, expr in queries
               for name in alerting.metric_names(expr) if name not in known}
    assert not unknown, sorted(unknown)


def test_the_name_extraction_sees_through_promql() -> None:
    expr = ('histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{model=~"$m", code="5.."}[5m]))) '
            '/ on (model) group_left (x) max without (pod) (b:c) > 0.5 and absent(d)')
    assert alerting.metric_names(expr) == {"a_bucket", "b:c", "d"}


def test_every_query_is_valid_promql(tmp_path: pathlib.Path) -> None:
    rules = [{"record": f"check:{i}", "expr": alerting.concrete(expr)}
             for i, (_, _, expr) in enumerate([*alerting.panel_queries(), *alerting.variable_queries()])]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    promtool.run("check", "rules", path)


def test_dashboards_are_what_the_generator_writes(tmp_path: pathlib.Path) -> None:
    before = {p.name: p.read_text() for p in alerting.DASHBOARDS.glob("*.json")}
    subprocess.run([sys.executable, str(ROOT / "hack" / "make-dashboards.py"), str(tmp_path)],
                   check=True, capture_output=True, timeout=60)
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == before


def test_each_dashboard_is_well_formed() -> None:
    boards = alerting.dashboards()
    assert set(boards) == {"shardwise-fleet", "shardwise-model", "shardwise-gateway"}
    for name, board in boards.items():
        assert board["uid"] == name and board["panels"], name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (name, panel["title"])
            assert all(t["refId"] and t["expr"] for t in panel["targets"]), (name, panel["title"])


def test_dashboards_render_into_a_sidecar_configmap(render: Render) -> None:
    assert not [o for o in render() if o["metadata"]["name"].endswith("-dashboards")]
    cm = find(render("dashboards.enabled=true"), "ConfigMap", "rel-shardwise-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "sw-system"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == {
        f"{k}.json": v for k, v in alerting.dashboards().items()}
    other = find(render("dashboards.enabled=true", "dashboards.namespace=monitoring",
                        "dashboards.annotations.grafana_folder=shardwise"), "ConfigMap", "rel-shardwise-dashboards")
    assert other["metadata"]["namespace"] == "monitoring"
    assert other["metadata"]["annotations"] == {"grafana_folder": "shardwise"}


@pytest.mark.parametrize("bad", ["dashboards.enabeld=true", "dashboards.enabled=yes-please"])
def test_the_schema_refuses_unknown_or_mistyped_dashboard_keys(render: Render, bad: str) -> None:
    with pytest.raises(AssertionError):
        render(bad)
