"""`promtool check metrics` on every /metrics body shardwise serves.

The operator's and the gateway's must be clean. The simulated engine copies vLLM 0.32 name for
name (the operator, the gateway's picker and the dashboards read both alike), so its findings
must be exactly those of the real engine's capture: vLLM's `vllm:` names and its
`vllm:iteration_tokens_total` histogram, and nothing the simulator adds of its own.
"""

from __future__ import annotations

import pathlib

import prometheus_client

import shardwise.controller.manager  # noqa: F401  (registers the manager's series on the operator's registry)
from shardwise.gateway import metrics as gateway_metrics
from shardwise.observe import operator_metrics
from shardwise_runtime.sim import metrics as sim_metrics
from tests import promtool

STATUS = {
    "latency": {"ttftP50Ms": 20.0, "ttftP95Ms": 40.0, "ttftP99Ms": 55.0, "itlP50Ms": 6.0,
                "itlP95Ms": 9.0, "e2eP95Ms": 300.0, "queueP95Ms": 12.0, "requestsPerSecond": 2.0,
                "promptTokensPerSecond": 80.0, "outputTokensPerSecond": 99.0, "running": 3,
                "waiting": 0, "kvCacheUsage": 0.12},
    "cost": {"hourlyUSD": 4.0, "perMillionOutputTokensUSD": 11.2},
    "replicas": 2, "readyReplicas": 2, "plan": {"tensorParallel": 1, "pipelineParallel": 1},
    "phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}],
    "modelCache": {"bytesDone": 5, "bytesTotal": 10},
}


def test_operator_metrics_pass_promtool() -> None:
    operator_metrics.publish_status("lint", "every-figure", STATUS)
    operator_metrics.RECONCILE_DURATION.labels("reconcile").observe(0.01)
    operator_metrics.RECONCILE_ERRORS.labels("reconcile")
    try:
        body = prometheus_client.generate_latest(operator_metrics.REGISTRY).decode()
        assert "shardwise_deployment_ttft_p95_seconds" in body
        assert promtool.check_metrics(body) == []
    finally:
        operator_metrics.forget("lint", "every-figure")


def test_gateway_metrics_pass_promtool() -> None:
    body = prometheus_client.generate_latest(gateway_metrics.REGISTRY).decode()
    assert promtool.check_metrics(body) == []


def test_simulated_engine_has_exactly_the_real_engines_findings(captures: pathlib.Path) -> None:
    engine = sim_metrics.EngineMetrics("lint-model", 4096, 16384)
    engine.set_load(running=2, waiting=1, kv_usage=0.2)
    engine.observe_prefill(prompt_tokens=40, ttft_s=0.05, step_tokens=41)
    engine.observe_token(0.01)
    engine.observe_finished(sim_metrics.FinishedRequest(
        finished_reason="stop", prompt_tokens=40, generation_tokens=2, max_generation_tokens=16,
        n=1, e2e_s=0.07, queue_s=0.001, prefill_s=0.05, decode_s=0.01))
    simulated = promtool.check_metrics(engine.exposition().decode())
    real = promtool.check_metrics((captures / "metrics-t1.txt").read_text())
    assert simulated == real
    assert all("should not contain ':'" in f or f.startswith("vllm:iteration_tokens_total")
               for f in real), real
