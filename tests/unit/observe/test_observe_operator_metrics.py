"""The operator's own /metrics: per-deployment figures follow the status, and go with it."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from shardwise.observe import operator_metrics as om

STATUS = {
    "latency": {"window": "5m", "ttftP95Ms": 40.0, "itlP50Ms": 6.01, "outputTokensPerSecond": 49.1},
    "cost": {"hourlyUSD": 19.92, "perMillionOutputTokensUSD": 5.53, "priceSource": "spec"},
    "replicas": 2,
    "readyReplicas": 1,
    "plan": {"tensorParallel": 4, "pipelineParallel": 1},
}


def _value(metric: str, **labels: str) -> float | None:
    return om.REGISTRY.get_sample_value("shardwise_deployment_" + metric, labels)


@pytest.fixture(autouse=True)
def _clean() -> None:
    om.forget("ml", "llama")


def test_status_figures_are_exported_in_base_units() -> None:
    om.publish_status("ml", "llama", STATUS)
    key = {"namespace": "ml", "name": "llama"}
    assert _value("ttft_p95_seconds", **key) == pytest.approx(0.040)
    assert _value("itl_p50_seconds", **key) == pytest.approx(0.00601)
    assert _value("tokens_per_second", **key, kind="output") == pytest.approx(49.1)
    assert _value("cost_usd_per_hour", **key) == pytest.approx(19.92)
    assert _value("cost_usd_per_million_output_tokens", **key) == pytest.approx(5.53)
    assert (_value("replicas_desired", **key), _value("replicas_ready", **key)) == (2, 1)
    assert (_value("tensor_parallel", **key), _value("pipeline_parallel", **key)) == (4, 1)


def test_a_figure_leaving_the_status_leaves_the_metrics() -> None:
    om.publish_status("ml", "llama", STATUS)
    om.publish_status("ml", "llama", {**STATUS, "latency": {"window": "5m"}})
    assert _value("ttft_p95_seconds", namespace="ml", name="llama") is None
    assert _value("cost_usd_per_hour", namespace="ml", name="llama") == pytest.approx(19.92)


def test_forget_removes_every_series_of_the_deployment() -> None:
    om.publish_status("ml", "llama", STATUS)
    om.publish_status("ml", "other", STATUS)
    om.forget("ml", "llama")
    assert _value("replicas_desired", namespace="ml", name="llama") is None
    assert _value("replicas_desired", namespace="ml", name="other") == 2
    om.forget("ml", "other")


def test_reconcile_metrics_are_labelled_by_handler() -> None:
    before = om.REGISTRY.get_sample_value(
        "shardwise_reconcile_errors_total", {"handler": "resume"}
    ) or 0.0
    om.RECONCILE_ERRORS.labels("resume").inc()
    with om.RECONCILE_DURATION.labels("resume").time():
        pass
    assert om.REGISTRY.get_sample_value(
        "shardwise_reconcile_errors_total", {"handler": "resume"}
    ) == before + 1
    assert om.REGISTRY.get_sample_value(
        "shardwise_reconcile_duration_seconds_count", {"handler": "resume"}
    ) >= 1


def test_server_serves_the_dedicated_registry_only() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    om.start_server(port, addr="127.0.0.1")
    om.publish_status("ml", "llama", STATUS)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'shardwise_deployment_ttft_p95_seconds{name="llama",namespace="ml"}' in body
    assert "python_gc_objects_collected_total" not in body  # not the global default registry


def test_phase_conditions_and_download_progress_follow_the_status() -> None:
    om.publish_status("ml", "llama", {
        **STATUS, "phase": "Degraded",
        "conditions": [{"type": "Degraded", "status": "True"}, {"type": "Ready", "status": "False"}],
        "modelCache": {"bytesDone": 10, "bytesTotal": 40},
    })
    key = {"namespace": "ml", "name": "llama"}
    assert _value("phase", **key, phase="Degraded") == 1
    assert _value("phase", **key, phase="Ready") == 0
    assert _value("condition", **key, type="Degraded", status="True") == 1
    assert _value("condition", **key, type="Ready", status="True") == 0
    assert (_value("model_cache_downloaded_bytes", **key), _value("model_cache_size_bytes", **key)) == (10, 40)
    om.forget("ml", "llama")
    assert _value("phase", **key, phase="Degraded") is None
