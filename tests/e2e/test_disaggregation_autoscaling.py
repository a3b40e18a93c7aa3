"""Each role of a disaggregated deployment scales on its own SLO, on a real control plane with
simulated engines: load sent straight to the decode engines (as the model's Service sends it,
decode prefilling itself) breaks decode's ITL SLO, and the decode role scales up while the prefill
role, which sees no request, stays at its minimum.

The numbers: Qwen2.5-7B on one H100 simulates an idle ITL of ~8 ms, doubling when its 8 slots are
full; vLLM's ITL histogram puts those in the buckets up to 10 ms and 25 ms, so an ITL p95 SLO of
15 ms holds at idle and breaks under load. Timings are compressed through the policy (a decision
every 3 s), not by sleeping. Every wait is a bounded poll that reports what it last saw.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import yaml
from shardwise.devcluster.cluster import LocalCluster
from shardwise_runtime.sim import load, targets

from tests.e2e.support import Kubectl, OperatorProcess, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

NAME = "pd-auto"
ITL_SLO_MS = 15
RPS = 12.0  # ~0.8 s a request of 64 tokens: one decode engine's 8 slots full, a queue behind them


def manifest() -> str:
    period = {"evaluationPeriodSeconds": 3, "scaleDownStabilizationSeconds": 12}
    spec = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": NAME},
        "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        "parallelism": {"objective": "Cost"},
        "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]},
        "disaggregation": {
            "mode": "Disaggregated",
            "prefill": {"slo": {"ttftP95": "5s"}, "autoscaling": {"minReplicas": 1, "maxReplicas": 2, **period}},
            "decode": {"slo": {"itlP95": f"{ITL_SLO_MS}ms"},
                       "autoscaling": {"minReplicas": 1, "maxReplicas": 3, **period}},
        },
    }
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": NAME}, "spec": spec})


class DecodeEngines:
    """The ready decode pods' engine URLs, listed at most every 2 s (the load asks per request)."""

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl
        self.urls: list[str] = []
        self.listed = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> list[str]:
        with self.lock:
            if time.monotonic() - self.listed > 2.0:
                self.listed = time.monotonic()
                try:
                    found = self.kubectl.get("pods", selector=f"shardwise.io/inference-deployment={NAME},"
                                             "shardwise.io/role=decode")
                    self.urls = targets.target_urls(found["items"]) or self.urls
                except RuntimeError:
                    pass  # keep the last known engines
            return list(self.urls)


def _roles(kubectl: Kubectl) -> dict[str, Any]:
    infd = kubectl.get("infd", NAME) or {}
    status = infd.get("status") or {}
    decided = (status.get("autoscaling") or {}).get("roles") or {}
    out: dict[str, Any] = {"spec": infd.get("spec"), "generation": (infd.get("metadata") or {}).get("generation")}
    for role in ("prefill", "decode"):
        deployment = kubectl.get("deployment", f"{NAME}-{role}") or {}
        out[role] = {"desired": (decided.get(role) or {}).get("desiredReplicas"),
                     "reason": (decided.get(role) or {}).get("reason"),
                     "ready": ((status.get("roles") or {}).get(role) or {}).get("readyReplicas"),
                     "workload": (deployment.get("spec") or {}).get("replicas")}
    return out


def test_decode_scales_up_on_its_itl_slo_while_prefill_stays(operator: OperatorProcess, kubectl: Kubectl,
                                                              cluster: LocalCluster) -> None:
    fleet = simulated_fleet(cluster, kubectl.namespace, "pd-auto")
    fleet.start()
    stop = threading.Event()
    try:
        kubectl.apply_yaml(manifest())
        start = eventually(lambda: (r := _roles(kubectl))["decode"]["ready"] == 1 and r["prefill"]["ready"] == 1
                           and r, timeout=120, what="one ready engine per role")
        engines = DecodeEngines(kubectl)
        eventually(engines, timeout=60, what="the decode engine")

        def drive() -> None:
            while not stop.is_set():  # 5 s rounds, so stopping takes at most one round
                try:
                    asyncio.run(load.run_load(engines, NAME, rps=RPS, duration_s=5, max_tokens=64,
                                              request_timeout_s=20))
                except Exception:  # noqa: BLE001 - an engine going away mid-stream; the next round goes on
                    continue

        driver = threading.Thread(target=drive, name="load", daemon=True)
        driver.start()
        up = eventually(lambda: (r := _roles(kubectl))["decode"]["desired"] is not None
                        and r["decode"]["desired"] >= 2 and r["decode"]["workload"] == r["decode"]["desired"] and r,
                        timeout=240, what="decode scaled up and carried to its Deployment")
        print(f"\ndecode scaled up: {up['decode']['reason']}\nprefill: {up['prefill']['reason']}")
        assert up["prefill"]["workload"] == 1 and up["prefill"]["desired"] in (None, 1), up["prefill"]
        events = [e for e in (kubectl.get("events") or {"items": []})["items"]
                  if e.get("reason") in ("ScaledUp", "ScaledDown") and e["involvedObject"]["name"] == NAME]
        assert any(e["reason"] == "ScaledUp" and e["message"].startswith("decode: ") for e in events), events
        assert not any(e["message"].startswith("prefill: ") and e["reason"] == "ScaledUp" for e in events), events
        assert up["spec"] == start["spec"] and up["generation"] == start["generation"]  # the spec is never written

        stop.set()
        driver.join(60)
        down = eventually(lambda: (r := _roles(kubectl))["decode"]["desired"] == 1 and r["decode"]["workload"] == 1
                          and r, timeout=240, what="decode back to its minimum once the load stopped")
        print(f"decode scaled down: {down['decode']['reason']}")
        assert down["prefill"]["workload"] == 1, down["prefill"]
    finally:
        stop.set()
        fleet.stop()
    assert operator.process.alive()
