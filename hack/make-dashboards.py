#!/usr/bin/env python3
"""Write charts/shardwise/dashboards/*.json, the Grafana dashboards the chart ships.

The JSON files are what the chart renders (a ConfigMap for Grafana's dashboard sidecar); this
script is how they are written, so that the panels stay few lines each here. Every query uses
series that shardwise or vLLM 0.32 really export: tests/unit/chart/test_dashboards.py checks each
name against the real engine's capture and the operator's and gateway's registries, and
tests/e2e/test_observability.py runs each query on a real Prometheus scraping a local fleet.
Run: .venv/bin/python hack/make-dashboards.py [OUT_DIR]
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

OUT = pathlib.Path(__file__).resolve().parents[1] / "charts" / "shardwise" / "dashboards"
RI = "$__rate_interval"
DEPLOYMENT = 'namespace=~"$namespace", name=~"$name"'
ENGINE = 'model_name=~"$model"'


def target(expr: str, legend: str = "") -> dict[str, Any]:
    return {"expr": expr, "legendFormat": legend}


def panel(title: str, unit: str, *targets: dict[str, Any], kind: str = "timeseries",
          width: int = 12, description: str = "") -> dict[str, Any]:
    return {"type": kind, "title": title, "description": description, "width": width,
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "targets": list(targets)}


def quantiles(metric: str, selector: str, qs: tuple[float, ...]) -> list[dict[str, Any]]:
    return [target(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{selector}}}[{RI}])))",
                   f"p{round(q * 100)}") for q in qs]


def variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}}


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]],
              variables: list[dict[str, Any]]) -> dict[str, Any]:
    laid, x, y, row_h = [], 0, 0, 8
    for i, p in enumerate(panels, start=1):
        width = p.pop("width")
        if x + width > 24:
            x, y = 0, y + row_h
        p["id"] = i
        p["gridPos"] = {"x": x, "y": y, "w": width, "h": row_h}
        p["datasource"] = {"type": "prometheus", "uid": "${datasource}"}
        for ref, t in zip("ABCDEFGHIJ", p["targets"]):
            t["refId"] = ref
            t["datasource"] = p["datasource"]
        laid.append(p)
        x += width
    datasource = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"}
    return {"uid": uid, "title": title, "description": description, "tags": ["shardwise"],
            "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "timezone": "browser",
            "templating": {"list": [datasource, *variables]}, "annotations": {"list": []}, "panels": laid}


def fleet() -> dict[str, Any]:
    by = "namespace, name"
    return dashboard("shardwise-fleet", "shardwise / Fleet", "Every InferenceDeployment: replicas, latency, "
                     "throughput and cost as on their status, and the operator's own health.", [
        panel("GPU cost", "currencyUSD", target("sum(shardwise_deployment_cost_usd_per_hour)", "$/hour"),
              kind="stat", width=6),
        panel("Ready replicas", "short", target("sum(shardwise_deployment_replicas_ready)", "ready"),
              target("sum(shardwise_deployment_replicas_desired)", "desired"), kind="stat", width=6),
        panel("Deployments by phase", "short", target("sum by (phase) (shardwise_deployment_phase)", "{{phase}}"),
              kind="stat", width=6),
        panel("Output tokens/s", "short",
              target('sum(shardwise_deployment_tokens_per_second{kind="output"})', "tokens/s"), kind="stat", width=6),
        panel("TTFT p95 (status window)", "s", target(f"max by ({by}) (shardwise_deployment_ttft_p95_seconds)",
                                                      "{{namespace}}/{{name}}")),
        panel("ITL p95 (status window)", "s", target(f"max by ({by}) (shardwise_deployment_itl_p95_seconds)",
                                                     "{{namespace}}/{{name}}")),
        panel("Replicas ready vs desired", "short",
              target(f"max by ({by}) (shardwise_deployment_replicas_ready)", "{{name}} ready"),
              target(f"max by ({by}) (shardwise_deployment_replicas_desired)", "{{name}} desired")),
        panel("Output tokens/s per deployment", "short",
              target(f'max by ({by}) (shardwise_deployment_tokens_per_second{{kind="output"}})', "{{name}}")),
        panel("$/hour per deployment", "currencyUSD",
              target(f"max by ({by}) (shardwise_deployment_cost_usd_per_hour)", "{{name}}")),
        panel("$ per 1M output tokens", "currencyUSD",
              target(f"max by ({by}) (shardwise_deployment_cost_usd_per_million_output_tokens)", "{{name}}")),
        panel("Operator: leader and caches synced", "short", target("max(shardwise_leader)", "leader"),
              target("min(shardwise_caches_synced)", "synced"), width=8),
        panel("Operator: reconciles/s and errors/s", "ops", target(f"sum(rate(shardwise_reconciles_total[{RI}]))",
                                                                  "reconciles"),
              target(f"sum by (handler) (rate(shardwise_reconcile_errors_total[{RI}]))", "errors {{handler}}"),
              width=8),
        panel("Operator: reconcile p95 and queue depth", "s",
              target(f"histogram_quantile(0.95, sum by (le) (rate(shardwise_reconcile_duration_seconds_bucket[{RI}])))",
                     "reconcile p95"),
              target("max(shardwise_workqueue_depth)", "queue depth"), width=8),
    ], [])


def model() -> dict[str, Any]:
    return dashboard("shardwise-model", "shardwise / Model", "One model: latency percentiles from the engines' "
                     "histograms, throughput, queue, KV cache, replicas and cost.", [
        panel("TTFT (engines)", "s", *quantiles("vllm:time_to_first_token_seconds", ENGINE, (0.5, 0.95, 0.99))),
        panel("Inter-token latency (engines)", "s",
              *quantiles("vllm:inter_token_latency_seconds", ENGINE, (0.5, 0.95, 0.99))),
        panel("End-to-end request latency (engines)", "s",
              *quantiles("vllm:e2e_request_latency_seconds", ENGINE, (0.5, 0.95))),
        panel("Queue time (engines)", "s", *quantiles("vllm:request_queue_time_seconds", ENGINE, (0.5, 0.95)),
              description="vLLM's first queue bucket is 0.3 s: a p95 below it is interpolated (docs/metrics.md)."),
        panel("Tokens/s", "short",
              target(f"sum(rate(vllm:generation_tokens_total{{{ENGINE}}}[{RI}]))", "output"),
              target(f"sum(rate(vllm:prompt_tokens_total{{{ENGINE}}}[{RI}]))", "prompt")),
        panel("Requests/s by finish reason", "reqps",
              target(f"sum by (finished_reason) (rate(vllm:request_success_total{{{ENGINE}}}[{RI}]))",
                     "{{finished_reason}}")),
        panel("Running and waiting requests", "short",
              target(f"sum(vllm:num_requests_running{{{ENGINE}}})", "running"),
              target(f"sum(vllm:num_requests_waiting{{{ENGINE}}})", "waiting")),
        panel("KV cache usage", "percentunit", target(f"avg(vllm:kv_cache_usage_perc{{{ENGINE}}})", "mean"),
              target(f"max(vllm:kv_cache_usage_perc{{{ENGINE}}})", "max")),
        panel("Replicas: ready vs desired", "short",
              target(f"max by (name) (shardwise_deployment_replicas_ready{{{DEPLOYMENT}}})", "ready"),
              target(f"max by (name) (shardwise_deployment_replicas_desired{{{DEPLOYMENT}}})", "desired")),
        panel("Cost", "currencyUSD",
              target(f"max by (name) (shardwise_deployment_cost_usd_per_hour{{{DEPLOYMENT}}})", "$/hour"),
              target(f"max by (name) (shardwise_deployment_cost_usd_per_million_output_tokens{{{DEPLOYMENT}}})",
                     "$/1M output tokens")),
        panel("TTFT p95: status vs engines", "s",
              target(f"max by (name) (shardwise_deployment_ttft_p95_seconds{{{DEPLOYMENT}}})", "status (window)"),
              *quantiles("vllm:time_to_first_token_seconds", ENGINE, (0.95,))),
        panel("Layout", "short",
              target(f"max by (name) (shardwise_deployment_tensor_parallel{{{DEPLOYMENT}}})", "TP"),
              target(f"max by (name) (shardwise_deployment_pipeline_parallel{{{DEPLOYMENT}}})", "PP"),
              kind="stat"),
    ], [variable("namespace", "label_values(shardwise_deployment_replicas_desired, namespace)", "Namespace"),
        variable("name", 'label_values(shardwise_deployment_replicas_desired{namespace=~"$namespace"}, name)',
                 "Deployment"),
        variable("model", "label_values(vllm:num_requests_running, model_name)", "Served model")])


def gateway() -> dict[str, Any]:
    m = 'model=~"$model"'
    return dashboard("shardwise-gateway", "shardwise / Gateway", "The front door: requests per model and per "
                     "API key, status codes, latency through the gateway, held and shed requests.", [
        panel("Requests/s by model and code", "reqps",
              target(f"sum by (model, code) (rate(shardwise_gateway_requests_total{{{m}}}[{RI}]))",
                     "{{model}} {{code}}")),
        panel("Error ratio (5xx and resets)", "percentunit",
              target(f'sum by (model) (rate(shardwise_gateway_requests_total{{{m}, code=~"5..|reset"}}[{RI}])) / '
                     f"sum by (model) (rate(shardwise_gateway_requests_total{{{m}}}[{RI}]))", "{{model}}")),
        panel("Time to first byte through the gateway, p95", "s",
              target("histogram_quantile(0.95, sum by (le, model) "
                     f"(rate(shardwise_gateway_time_to_first_byte_seconds_bucket{{{m}}}[{RI}])))", "{{model}}")),
        panel("Request duration through the gateway, p95", "s",
              target("histogram_quantile(0.95, sum by (le, model) "
                     f"(rate(shardwise_gateway_request_duration_seconds_bucket{{{m}}}[{RI}])))", "{{model}}")),
        panel("Held requests (waking models)", "short",
              target(f"sum by (model) (shardwise_gateway_held_requests{{{m}}})", "{{model}}")),
        panel("Shed requests/s and wake signals/s", "reqps",
              target(f"sum by (model, code) (rate(shardwise_gateway_shed_requests_total{{{m}}}[{RI}]))",
                     "shed {{model}} {{code}}"),
              target(f"sum by (model) (rate(shardwise_gateway_wake_signals_total{{{m}}}[{RI}]))", "wake {{model}}")),
        panel("Tokens/s by model", "short",
              target(f"sum by (model, direction) (rate(shardwise_gateway_tokens_total{{{m}}}[{RI}]))",
                     "{{model}} {{direction}}")),
        panel("Ready endpoints and broken responses/s", "short",
              target(f"sum by (model) (shardwise_gateway_endpoints{{{m}}})", "endpoints {{model}}"),
              target(f"sum by (model) (rate(shardwise_gateway_broken_responses_total{{{m}}}[{RI}]))",
                     "broken {{model}}")),
        panel("Requests/s by API key and code", "reqps",
              target(f"sum by (key, code) (rate(shardwise_gateway_key_requests_total[{RI}]))", "{{key}} {{code}}")),
        panel("Tokens/s by API key", "short",
              target(f"sum by (key, direction) (rate(shardwise_gateway_key_tokens_total[{RI}]))",
                     "{{key}} {{direction}}")),
        panel("Cost by API key, last hour", "currencyUSD",
              target("sum by (key) (increase(shardwise_gateway_key_cost_usd_total[1h]))", "{{key}}")),
        panel("429s by API key and limit", "reqps",
              target(f"sum by (key, limit) (rate(shardwise_gateway_rate_limited_total[{RI}]))", "{{key}} {{limit}}")),
        panel("Gateway: caches synced, quota store up", "short",
              target("min(shardwise_gateway_caches_synced)", "synced"),
              target("min(shardwise_gateway_quota_store_up)", "quota store up")),
    ], [variable("model", "label_values(shardwise_gateway_requests_total, model)", "Model")])


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, board in (("fleet", fleet()), ("model", model()), ("gateway", gateway())):
        (out / f"shardwise-{name}.json").write_text(json.dumps(board, indent=1, sort_keys=True) + "\n")
        print(f"wrote {out / f'shardwise-{name}.json'}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
