"""SLO autoscaling end to end: load breaches TTFT, replicas go up, latency recovers, load stops,
replicas come back down; the user's spec is never written.

Timings are compressed through the policy (evaluation every 3 s, 12 s of sustained headroom before
a scale-down) and the test operator's 15 s metrics window, not by sleeping real minutes. The
simulated engines run as `shardwise-sim fleet`, which follows pods as the Deployment scales; the
load generator follows the ready pods the same way, as a Service would spread requests.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process
from shardwise_runtime.sim import load, targets

from tests.e2e.support import Kubectl, eventually

pytestmark = pytest.mark.e2e

NAME = "mistral-auto"
SLO_MS = 400
# One replica with 4 slots serves ~6 requests/s of 32 tokens; 9/s queues without bound there and
# fits comfortably in three.
RPS = 9.0


def manifest(name: str, *, max_replicas: int, period_s: float, window_s: float) -> str:
    """Mistral-7B on A100s, 4 slots a replica, autoscaled on a TTFT p95 SLO of SLO_MS."""
    return f"""
apiVersion: shardwise.io/v1alpha1
kind: InferenceDeployment
metadata: {{name: {name}}}
spec:
  model: {{name: mistralai/Mistral-7B-Instruct-v0.3, servedName: {name}}}
  serving: {{maxModelLen: 4096, maxConcurrency: 4}}
  parallelism: {{objective: Cost}}
  placement: {{gpuProducts: [NVIDIA-A100-80GB-PCIe]}}
  autoscaling:
    minReplicas: 1
    maxReplicas: {max_replicas}
    slo: {{ttftP95: {SLO_MS}ms}}
    evaluationPeriodSeconds: {period_s:g}
    scaleDownStabilizationSeconds: {window_s:g}
"""


MANIFEST = manifest(NAME, max_replicas=3, period_s=3, window_s=12)


@pytest.fixture
def sim_fleet(cluster: LocalCluster, namespace: str) -> Iterator[Process]:
    argv = [sys.executable, "-c", "import sys; from shardwise_runtime.sim.server import main; sys.exit(main())",
            "fleet", "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace]
    process = Process("sim-fleet", argv, cluster.log_dir / f"sim-fleet-{namespace}.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _state(kubectl: Kubectl) -> dict[str, Any]:
    infd = kubectl.get("infd", NAME)
    deployment = kubectl.get("deployment", NAME) or {}
    status = infd.get("status") or {}
    return {"generation": infd["metadata"]["generation"], "spec": infd["spec"],
            "desired": status.get("desiredReplicas"), "ready": status.get("readyReplicas"),
            "workload": (deployment.get("spec") or {}).get("replicas"),
            "ttftP95Ms": (status.get("latency") or {}).get("ttftP95Ms"),
            "reason": (status.get("autoscaling") or {}).get("reason")}


def test_replicas_follow_load_to_keep_ttft_under_the_slo(operator: Any, cluster: LocalCluster,
                                                          kubectl: Kubectl, sim_fleet: Process) -> None:
    kubectl.apply_yaml(MANIFEST)
    start = eventually(lambda: (s := _state(kubectl))["ready"] == 1 and s, timeout=60, what="one ready replica")
    follow = targets.follow_deployment(str(cluster.kubeconfig), kubectl.namespace, NAME, refresh_s=1.0)
    eventually(follow, timeout=20, what="the engine of the first replica")

    stop = threading.Event()
    records: list[load.RequestRecord] = []

    def drive() -> None:
        while not stop.is_set():  # 5 s rounds, so stopping takes at most one round
            records.extend(asyncio.run(load.run_load(follow, NAME, rps=RPS, duration_s=5, max_tokens=32,
                                                     request_timeout_s=20)))

    driver = threading.Thread(target=drive, name="load", daemon=True)
    driver.start()
    try:
        # A step from idle looks like a burst until it outlasts one replica start (the expected
        # start of this model, ~60 s here) or its queue outgrows what the replica drains in that
        # time: only then is it demand worth a replica (docs/autoscaling.md, bursts and trends).
        up = eventually(lambda: (s := _state(kubectl))["desired"] >= 2 and s["workload"] == s["desired"] and s,
                        timeout=180, what="a scale-up carried to the Deployment")
        print(f"\nscaled up: {up['reason']}")
        recovered = eventually(
            lambda: (s := _state(kubectl))["ttftP95Ms"] is not None and s["ttftP95Ms"] <= SLO_MS
            and s["ready"] == s["desired"] >= 2 and s,
            timeout=60, what=f"TTFT p95 back under {SLO_MS} ms with the new replicas serving")
        print(f"recovered: TTFT p95 {recovered['ttftP95Ms']} ms at {recovered['desired']} replicas")
        assert (kubectl.condition(NAME, "SLOMet") or {}).get("status") in ("True", "False")
    finally:
        stop.set()
        driver.join(30)
        follow.close()  # a refresh thread still polling at interpreter exit can abort the process

    down = eventually(lambda: (s := _state(kubectl))["desired"] == 1 and s["workload"] == 1 and s,
                      timeout=240, what="replicas back to minReplicas once the load stopped")
    print(f"scaled down: {down['reason']}")
    assert down["generation"] == start["generation"] and down["spec"] == start["spec"]
    assert "replicas" not in start["spec"] or start["spec"]["replicas"] == down["spec"]["replicas"]
    scaled = [e for e in (kubectl.get("events") or {"items": []})["items"]
              if e.get("reason") in ("ScaledUp", "ScaledDown") and e["involvedObject"]["name"] == NAME]
    assert {e["reason"] for e in scaled} == {"ScaledUp", "ScaledDown"}
    assert all("replicas" in e["message"] and "->" in e["message"] for e in scaled)
    assert operator.process.alive()
