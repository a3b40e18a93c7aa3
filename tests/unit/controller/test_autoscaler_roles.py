"""The autoscaler's shell on a disaggregated pair: each role decided on its own engines' figures,
written under status.autoscaling.roles, and a pair at zero woken together by the gateway's
annotation, one decision per role remembered under its own key."""

from __future__ import annotations

import json
from typing import Any

from shardwise.controller.autoscaling import Autoscaler
from shardwise.controller.autoscaling_store import data_key
from shardwise.controller.settings import Settings
from shardwise.observe.aggregate import Summary
from tests.unit.controller.test_autoscaler_stale_cache import NAME, NS, LaggingCluster

ZERO = {"minReplicas": 0, "maxReplicas": 3, "allowScaleToZero": True, "evaluationPeriodSeconds": 5}


class MergingCluster(LaggingCluster):
    """Status patches applied as JSON merge patches, as the API server applies them (a nested
    field left out of the patch keeps its value)."""

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None) -> dict[str, Any]:
        merged = merge(self.live["status"], status_patch)
        return super().patch_status(namespace, name, merged, resource_version=resource_version)


def merge(base: Any, patch: Any) -> Any:
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(base.get(key), value)
    return out


def pair_cluster(prefill: dict[str, Any], decode: dict[str, Any], status: dict[str, Any]) -> LaggingCluster:
    kube = MergingCluster()
    spec = kube.live["spec"]
    del spec["autoscaling"]
    spec["disaggregation"] = {"mode": "Disaggregated",
                              "prefill": {"slo": {"ttftP95": "2s"}, "autoscaling": prefill},
                              "decode": {"slo": {"itlP95": "30ms"}, "autoscaling": decode}}
    kube.live["status"].update(status)
    kube.catch_up()
    return kube


def summary(*, ttft: float, itl: float, rps: float = 4.0) -> Summary:
    return Summary(window_seconds=15, pods=1, requests=rps * 15, prompt_tokens=0, output_tokens=0,
                   ttft_p50_ms=ttft / 2, ttft_p95_ms=ttft, ttft_p99_ms=ttft, itl_p50_ms=itl / 2, itl_p95_ms=itl,
                   e2e_p95_ms=None, queue_p95_ms=None, requests_per_second=rps, prompt_tokens_per_second=None,
                   output_tokens_per_second=None, running=3.0, waiting=0.0, kv_cache_usage=0.3)


def test_a_pair_at_zero_wakes_both_roles_and_remembers_each() -> None:
    kube = pair_cluster(ZERO, ZERO, {"desiredReplicas": 0, "roles": {"prefill": {"readyReplicas": 0},
                                                                     "decode": {"readyReplicas": 0}}})
    scaler = Autoscaler(kube, Settings(), latest=lambda ns, name: None, reconcile=lambda ns, name: None,
                        clock=lambda: 1000.0)
    scaler.wake(NS, NAME)
    scaler.tick()
    roles = kube.live["status"]["autoscaling"]["roles"]
    assert (roles["prefill"]["desiredReplicas"], roles["decode"]["desiredReplicas"]) == (1, 1), kube.writes
    assert sorted(e["message"].split(":")[0] for e in kube.events if e["reason"] == "ScaledUp") == ["decode", "prefill"]
    assert kube.configmap is not None
    for role in ("prefill", "decode"):
        runs = json.loads(kube.configmap["data"][data_key(NS, f"{NAME}.{role}")])["runs"]
        assert [run[2] for run in runs] == [1]


def test_each_role_is_judged_on_its_own_engines() -> None:
    bounds = {"minReplicas": 1, "maxReplicas": 4, "evaluationPeriodSeconds": 5}
    kube = pair_cluster(bounds, bounds, {"roles": {"prefill": {"readyReplicas": 1}, "decode": {"readyReplicas": 1}},
                                         "autoscaling": {"roles": {"prefill": {"desiredReplicas": 1},
                                                                   "decode": {"desiredReplicas": 1}}}})
    figures = {"prefill": summary(ttft=1500.0, itl=90.0), "decode": summary(ttft=9000.0, itl=45.0)}
    scaler = Autoscaler(kube, Settings(), latest=lambda ns, name: summary(ttft=9000.0, itl=90.0),
                        reconcile=lambda ns, name: None, clock=lambda: 1000.0,
                        latest_role=lambda ns, name, role: figures[role])
    scaler.wake(NS, NAME)
    scaler.tick()
    roles = kube.live["status"]["autoscaling"]["roles"]
    # decode: ITL 45 ms against 30 ms; prefill: TTFT 1.5 s within 2 s (its engines' ITL is no target).
    assert roles["decode"]["desiredReplicas"] == 2 and "ITL" in roles["decode"]["reason"], roles
    assert roles["prefill"]["desiredReplicas"] == 1, roles
