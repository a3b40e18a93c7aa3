"""One model per engine (vllm, sglang, trtllm) from one kind of spec, on the session's control plane
(KWOK nodes, the operator) with the simulated fleet, behind one front door (issue 40, first
Done-when).

The fleet starts a simulated engine per pod from the pod's rendered argv: `vllm serve`, `python3
-m sglang.launch_server` or `trtllm-serve`, each speaking that engine's routes and metric families
(runtime/shardwise_runtime/sim/engine_metrics.py). The observer reads each engine's Prometheus path
(trtllm: /prometheus/metrics) into the same status; the autoscaler scales the SGLang one on its
TTFT SLO from the sglang: families.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from tests.e2e.support import Kubectl, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

MODEL = "Qwen/Qwen2.5-7B-Instruct"
ENGINES = ("vllm", "sglang", "trtllm")
PRICE = 2.0
SLO_MS = 300


def name_of(engine: str) -> str:
    return f"eng-{engine}"


def manifest(engine: str, **spec: Any) -> str:
    doc = {"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": name_of(engine)},
           "spec": {"engine": engine, "model": {"name": MODEL, "servedName": name_of(engine)},
                    "serving": {"maxModelLen": 4096, "maxConcurrency": 2}, "parallelism": {"objective": "Cost"},
                    "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]},
                    "pricing": {"gpuHourUSD": f"{PRICE:.2f}"}, **spec}}
    return json.dumps(doc)


class Setup:
    def __init__(self, kubectl: Kubectl, door: FrontDoor) -> None:
        self.kubectl, self.door = kubectl, door


def _served(door: FrontDoor, model: str) -> bool:
    response = httpx.post(f"{door.base_url}/completions", json={"model": model, "prompt": "hi", "max_tokens": 1},
                          timeout=10)
    return response.status_code == 200


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, operator: Any) -> Iterator[Setup]:
    namespace = f"eng-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    engines = simulated_fleet(cluster, namespace, "eng")
    engines.start()
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"gw-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1)
    try:
        kubectl.apply_yaml(manifest("vllm", replicas=1))
        kubectl.apply_yaml(manifest("trtllm", replicas=1))
        kubectl.apply_yaml(manifest("sglang", autoscaling={
            "minReplicas": 1, "maxReplicas": 2, "slo": {"ttftP95": f"{SLO_MS}ms"},
            "evaluationPeriodSeconds": 3, "scaleDownStabilizationSeconds": 600}))
        door.start()
        eventually(lambda: all(_served(door, name_of(e)) for e in ENGINES), timeout=180,
                   what="three engines answering through the front door")
        yield Setup(kubectl, door)
    finally:
        door.stop()
        engines.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_three_engines_ready_behind_one_door_with_live_latency_and_cost(fleet: Setup) -> None:
    client = openai.OpenAI(base_url=fleet.door.base_url, api_key="unused", max_retries=0, timeout=60)
    for engine in ENGINES:
        name = name_of(engine)
        reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hello"}],
                                               max_tokens=4)
        assert reply.usage.completion_tokens == 4
        # trtllm-serve answers under the model it was started with, whatever the request named.
        assert reply.model == (MODEL if engine == "trtllm" else name)
        chunks = list(client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "hello"}], max_tokens=6, stream=True,
            stream_options={"include_usage": True}))
        assert chunks[-1].usage.completion_tokens == 6

    def live(engine: str) -> dict[str, Any] | None:
        # Keep a trickle of requests going so the window has figures from this engine's metrics.
        client.completions.create(model=name_of(engine), prompt="once", max_tokens=8)
        status = fleet.kubectl.get("infd", name_of(engine)).get("status") or {}
        ready = {c["type"]: c["status"] for c in status.get("conditions") or []}.get("Ready")
        latency, cost = status.get("latency") or {}, status.get("cost") or {}
        if (ready == "True" and latency.get("ttftP95Ms") and latency.get("itlP95Ms")
                and latency.get("scrapeErrors") == 0 and cost.get("hourlyUSD") == pytest.approx(PRICE)
                and cost.get("perMillionOutputTokensUSD")):
            return status
        return None

    for engine in ENGINES:
        status = eventually(lambda: live(engine), timeout=120,
                            what=f"{engine}: Ready with TTFT, ITL and cost from its own metrics")
        print(f"\n{engine}: latency {status['latency']} cost {status['cost']}")


def test_the_autoscaler_scales_the_sglang_one_on_its_ttft_slo(fleet: Setup) -> None:
    name = name_of("sglang")
    stop = threading.Event()

    def drive() -> None:  # more streams than its 2 slots: the queue pushes TTFT over the SLO
        client = openai.OpenAI(base_url=fleet.door.base_url, api_key="unused", max_retries=0, timeout=60)
        while not stop.is_set():
            try:
                client.completions.create(model=name, prompt="load", max_tokens=32)
            except openai.OpenAIError:
                pass

    drivers = [threading.Thread(target=drive, daemon=True) for _ in range(8)]
    for driver in drivers:
        driver.start()
    try:
        def scaled() -> dict[str, Any] | None:
            status = fleet.kubectl.get("infd", name).get("status") or {}
            return status if int(status.get("desiredReplicas") or 0) >= 2 else None

        status = eventually(scaled, timeout=300, what="the SGLang deployment scaled up on its TTFT SLO")
        print(f"\nsglang scaled: {status.get('autoscaling')} latency {status.get('latency')}")
        assert status["latency"]["ttftP95Ms"] > SLO_MS
    finally:
        stop.set()
        for driver in drivers:
            driver.join(timeout=70)
    events = [e for e in (fleet.kubectl.get("events") or {"items": []})["items"]
              if e.get("reason") == "ScaledUp" and e["involvedObject"]["name"] == name]
    assert events and "->" in events[0]["message"]
