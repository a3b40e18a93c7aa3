"""The observer's pure pieces: which pods are scraped, cost, SLOMet, MetricsAvailable, the update."""

from __future__ import annotations

from typing import Any

import pytest
from shardwise.api import v1alpha1 as api
from shardwise.decide import live_status
from shardwise.observe import aggregate, collector

NOW = "2026-01-01T00:00:00Z"


def pod(name: str, *, ready: bool = True, ip: str | None = "127.1.0.5", worker: str | None = None,
        deleting: bool = False) -> dict[str, Any]:
    labels = {"shardwise.io/inference-deployment": "m"}
    if worker is not None:
        labels[live_status.WORKER_INDEX_LABEL] = worker
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = NOW
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def summary(**figures: Any) -> aggregate.Summary:
    base = dict.fromkeys(f.name for f in aggregate.Summary.__dataclass_fields__.values())
    base.update(window_seconds=300.0, pods=1, requests=0.0, prompt_tokens=0.0, output_tokens=0.0)
    base.update(figures)
    return aggregate.Summary(**base)


def spec(**extra: Any) -> api.InferenceDeploymentSpec:
    return api.InferenceDeploymentSpec.model_validate({"model": {"name": "m"}, **extra})


def test_scrape_targets_keeps_ready_leaders_with_an_ip() -> None:
    pods = [pod("a"), pod("b", ready=False), pod("c", ip=None), pod("d", worker="1"),
            pod("e", worker="0", ip="127.1.0.9"), pod("f", deleting=True)]
    assert live_status.scrape_targets(pods) == {"a": "127.1.0.5", "e": "127.1.0.9"}


@pytest.mark.parametrize(("spec_price", "prices", "hourly", "source"), [
    ("3.00", {"NVIDIA-L4": 9.0}, 24.0, "spec"),
    (None, {"NVIDIA-L4": 0.5}, 4.0, "cluster"),
    (None, {}, 6.4, "default"),
])
def test_cost_is_gpus_of_ready_replicas_times_the_resolved_price(
        spec_price: str | None, prices: dict[str, float], hourly: float, source: str) -> None:
    plan = {"gpuProduct": "NVIDIA-L4", "gpusPerReplica": 2}
    s = spec(pricing={"gpuHourUSD": spec_price} if spec_price else {})
    out = live_status.status_cost(plan, 4, s, prices, summary(output_tokens_per_second=100.0,
                                                            prompt_tokens_per_second=300.0))
    assert out["hourlyUSD"] == pytest.approx(hourly)
    assert out["gpuHoursPerHour"] == 8
    assert out["priceSource"] == source
    assert out["perMillionOutputTokensUSD"] == pytest.approx(hourly / (100 * 3600) * 1e6, rel=1e-2)
    assert out["perMillionTotalTokensUSD"] == pytest.approx(hourly / (400 * 3600) * 1e6, rel=1e-2)


def test_cost_without_throughput_has_no_per_token_price() -> None:
    out = live_status.status_cost({"gpuProduct": "NVIDIA-L4", "gpusPerReplica": 1}, 0, spec(), {}, summary())
    assert out == {"gpuHoursPerHour": 0.0, "hourlyUSD": 0.0, "priceSource": "default"}


def test_slo_condition_names_the_breach_with_numbers() -> None:
    slo = api.SLOSpec(ttftP95="500ms", itlP95="0.05s")
    cond = live_status.slo_condition(slo, {"ttftP95Ms": 812, "itlP95Ms": 40, "window": "5m"})
    assert (cond.status, cond.reason) == (False, "SLOBreached")
    assert cond.message == "TTFT p95 812 ms > SLO 500 ms; ITL p95 40 ms <= SLO 50 ms"


def test_slo_condition_met_and_unknown_without_traffic() -> None:
    slo = api.SLOSpec(ttftP95="1s")
    assert live_status.slo_condition(slo, {"ttftP95Ms": 300}).status is True
    idle = live_status.slo_condition(slo, {"window": "5m"})
    assert (idle.status, idle.reason) == (None, "NoTraffic")


def test_metrics_condition_lists_failing_pods_by_kind_only() -> None:
    errors = {"b": collector.ScrapeError("timeout", "GET x: no answer within 3s"),
              "a": collector.ScrapeError("connect", "GET y: refused")}
    cond = live_status.metrics_condition(3, errors)
    assert (cond.status, cond.reason) == (False, "ScrapeFailed")
    assert cond.message == "2 of 3 serving pods did not answer /metrics: a (connect), b (timeout)"
    assert live_status.metrics_condition(0, {}).status is None
    assert live_status.metrics_condition(2, {}).status is True


def infd(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "m", "namespace": "n", "generation": 3}, "status": status}


def test_status_update_keeps_reconciles_conditions_and_skips_figures_when_told() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": NOW}
    current = {"conditions": [ready], "latency": {"ttftP95Ms": 100, "window": "5m"}}
    observed = live_status.Observed({"latency": {"ttftP95Ms": 900, "window": "5m"}, "cost": {"hourlyUSD": 1.0}},
                                  1, {})
    s = spec(autoscaling={"maxReplicas": 2, "slo": {"ttftP95": "500ms"}})
    held = live_status.status_update(infd(current), s, observed, write_figures=False, now=NOW)
    assert set(held) == {"conditions"}
    by_type = {c["type"]: c for c in held["conditions"]}
    assert by_type["Ready"] == ready  # reconcile's condition, untouched
    assert by_type["SLOMet"]["status"] == "True"  # judged on what the status says, not the unwritten 900
    written = live_status.status_update(infd(current), s, observed, write_figures=True, now=NOW)
    assert written["latency"]["ttftP95Ms"] == 900 and written["cost"] == {"hourlyUSD": 1.0}
    assert {c["type"]: c for c in written["conditions"]}["SLOMet"]["status"] == "False"


def test_status_update_drops_slomet_when_the_spec_has_no_slo() -> None:
    old = {"type": "SLOMet", "status": "True", "reason": "WithinSLO", "message": "", "lastTransitionTime": NOW}
    observed = live_status.Observed({"latency": {"window": "5m"}}, 1, {})
    update = live_status.status_update(infd({"conditions": [old]}), spec(), observed, write_figures=True, now=NOW)
    assert [c["type"] for c in update["conditions"]] == ["MetricsAvailable"]
