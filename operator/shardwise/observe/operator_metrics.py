"""The operator's own Prometheus metrics: reconcile health and each deployment's live figures.

Everything lives in a dedicated CollectorRegistry so the operator's `/metrics` carries only
shardwise series (no accidental global-registry extras, and tests can read it in isolation).
Per-deployment figures are served by a custom collector from the last published status rather
than by labelled Gauges: a figure that leaves the status, or a deployment that is deleted,
then simply stops being exported, with no stale series left behind. Values are in base units
(seconds, ratios), as Prometheus naming conventions ask, while the status speaks milliseconds.
A percentile is a gauge of its own (`..._ttft_p95_seconds`), not a `quantile` label: that label
belongs to summaries, and `promtool check metrics` refuses it on a gauge.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = prometheus_client.CollectorRegistry()

RECONCILE_DURATION = prometheus_client.Histogram(
    "shardwise_reconcile_duration_seconds",
    "Time spent in one reconcile handler call.",
    ["handler"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = prometheus_client.Counter(
    "shardwise_reconcile_errors",
    "Reconcile handler calls that raised.",
    ["handler"],
    registry=REGISTRY,
)

_MS = 1e-3  # the status speaks milliseconds, Prometheus seconds
_TTFT, _ITL = "Time to first token", "Inter-token latency"
_TOKENS = "Tokens per second."

# (status path, metric, help, extra labels, factor to the metric's unit)
_SERIES: tuple[tuple[str, str, str, tuple[tuple[str, str], ...], float], ...] = (
    ("latency.ttftP50Ms", "ttft_p50_seconds", f"{_TTFT}, p50 over the status window.", (), _MS),
    ("latency.ttftP95Ms", "ttft_p95_seconds", f"{_TTFT}, p95 over the status window.", (), _MS),
    ("latency.ttftP99Ms", "ttft_p99_seconds", f"{_TTFT}, p99 over the status window.", (), _MS),
    ("latency.itlP50Ms", "itl_p50_seconds", f"{_ITL}, p50 over the status window.", (), _MS),
    ("latency.itlP95Ms", "itl_p95_seconds", f"{_ITL}, p95 over the status window.", (), _MS),
    ("latency.e2eP95Ms", "e2e_p95_seconds", "End-to-end request latency, p95.", (), _MS),
    ("latency.queueP95Ms", "queue_p95_seconds", "Time queued in vLLM, p95.", (), _MS),
    ("latency.requestsPerSecond", "requests_per_second", "Finished requests per second.", (), 1),
    ("latency.promptTokensPerSecond", "tokens_per_second", _TOKENS, (("kind", "prompt"),), 1),
    ("latency.outputTokensPerSecond", "tokens_per_second", _TOKENS, (("kind", "output"),), 1),
    ("latency.running", "running_requests", "Requests being processed.", (), 1),
    ("latency.waiting", "waiting_requests", "Requests waiting for the scheduler.", (), 1),
    ("latency.kvCacheUsage", "kv_cache_usage_ratio", "Mean KV-cache usage across pods.", (), 1),
    ("cost.hourlyUSD", "cost_usd_per_hour", "GPU cost per hour.", (), 1),
    ("cost.perMillionOutputTokensUSD", "cost_usd_per_million_output_tokens",
     "GPU cost per million output tokens at the observed throughput.", (), 1),
    ("replicas", "replicas_desired", "Replicas the deployment asks for.", (), 1),
    ("readyReplicas", "replicas_ready", "Replicas ready to serve.", (), 1),
    ("plan.tensorParallel", "tensor_parallel", "Planned tensor-parallel degree.", (), 1),
    ("plan.pipelineParallel", "pipeline_parallel", "Planned pipeline-parallel degree.", (), 1),
    ("modelCache.bytesDone", "model_cache_downloaded_bytes", "Model weights downloaded so far.", (), 1),
    ("modelCache.bytesTotal", "model_cache_size_bytes", "Model weights to download in all.", (), 1),
)
PHASES = ("Pending", "Progressing", "Ready", "Degraded", "Failed")
_PREFIX = "shardwise_deployment_"


def _lookup(status: Mapping[str, Any], path: str) -> float | None:
    node: Any = status
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    return float(node)


class _DeploymentCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (namespace, name) -> {series index in _SERIES: value}
        self._values: dict[tuple[str, str], dict[int, float]] = {}

        # (namespace, name) -> (phase, ((condition type, status), ...))
        self._states: dict[tuple[str, str], tuple[str | None, tuple[tuple[str, str], ...]]] = {}

    def publish(self, key: tuple[str, str], status: Mapping[str, Any]) -> None:
        values = {}
        for i, (path, _, _, _, factor) in enumerate(_SERIES):
            value = _lookup(status, path)
            if value is not None:
                values[i] = value * factor
        phase = status.get("phase") if isinstance(status.get("phase"), str) else None
        conds = tuple(sorted(
            (str(c.get("type")), str(c.get("status")))
            for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type")))
        with self._lock:
            self._values[key] = values
            self._states[key] = (phase, conds)

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._values.pop(key, None)
            self._states.pop(key, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            snapshot = sorted(self._values.items())
            states = sorted(self._states.items())
        # kube-state-metrics' shape: one series per phase, 1 for the current one, so that
        # `== 1` selects it and a phase change is a value change, not a vanished series.
        phases = GaugeMetricFamily(_PREFIX + "phase", "1 for the deployment's current phase.",
                                   labels=["namespace", "name", "phase"])
        conditions = GaugeMetricFamily(_PREFIX + "condition", "1 for each condition's current status.",
                                       labels=["namespace", "name", "type", "status"])
        for (namespace, name), (phase, conds) in states:
            if phase is not None:
                for known in sorted({*PHASES, phase}):
                    phases.add_metric([namespace, name, known], 1.0 if known == phase else 0.0)
            for type_, value in conds:
                for known in ("True", "False", "Unknown"):
                    conditions.add_metric([namespace, name, type_, known], 1.0 if known == value else 0.0)
        yield phases
        yield conditions
        families: dict[str, GaugeMetricFamily] = {}
        for i, (_, metric, help_text, extra, _) in enumerate(_SERIES):
            if metric not in families:
                labels = ["namespace", "name", *(k for k, _ in extra)]
                families[metric] = GaugeMetricFamily(_PREFIX + metric, help_text, labels=labels)
            for (namespace, name), values in snapshot:
                if i in values:
                    families[metric].add_metric(
                        [namespace, name, *(v for _, v in extra)], values[i]
                    )
        yield from families.values()


_DEPLOYMENTS = _DeploymentCollector()
REGISTRY.register(_DEPLOYMENTS)


def publish_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Export the figures of one InferenceDeployment's status; absent figures are not exported."""
    _DEPLOYMENTS.publish((namespace, name), status)


def forget(namespace: str, name: str) -> None:
    """Stop exporting a deleted InferenceDeployment."""
    _DEPLOYMENTS.forget((namespace, name))


def start_server(port: int, addr: str = "0.0.0.0") -> None:
    """Serve REGISTRY on http://addr:port/metrics from a background thread."""
    prometheus_client.start_http_server(port, addr=addr, registry=REGISTRY)
