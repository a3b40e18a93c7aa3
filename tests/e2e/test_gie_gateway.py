"""shardwise's InferencePools and HTTPRoutes behind a Gateway API Inference Extension gateway.

Two InferenceDeployments with `spec.routing` (a pool each, an HTTPRoute each) on the simulated
fleet; in front of them a GIE gateway built from upstream parts only (tests/e2e/gie_gateway.py):
a real Envoy, GIE v1.5.0's body-based router and, per pool, GIE v1.5.0's endpoint picker, both
built from their Go modules by hack/build-gie.sh (cached outside the clone). The Envoy routes are
translated from the objects shardwise wrote, as a gateway controller would translate them. An
OpenAI client reaches each model by its name; scaling a deployment changes the picker's endpoints
(it watches the pods through the pool's selector) and never the pool; pointing the pools at
shardwise's own picker (`shardwise gateway serve`) serves the same requests.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
import yaml

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process
from tests.e2e import gie_gateway
from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

LABEL = "shardwise.io/inference-deployment"
MODELS = {"gie-a": "epp-gie-a", "gie-b": "epp-gie-b"}  # deployment -> the picker Service its pool names
SHARDWISE_PICKER = "shardwise-picker"


def _manifest(name: str, picker: str, replicas: int = 1) -> str:
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": name},
                           "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": f"{name}-served"},
                                    "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
                                    "parallelism": {"objective": "Cost"},
                                    "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}, "replicas": replicas,
                                    "routing": {"inferencePool": {"endpointPicker": {"name": picker, "port": 9002}},
                                                "httpRoute": {"gatewayRef": {"name": "gie-gateway"}}}}})


class Gateway:
    """The GIE gateway of one namespace: BBR, the pickers, and an Envoy translated from the API."""

    def __init__(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        self.cluster, self.kubectl = cluster, kubectl
        folder = subprocess.run([str(ROOT / "hack/build-gie.sh")], check=True, capture_output=True, text=True,
                                timeout=1800).stdout.strip().splitlines()[-1]
        self.bins = {name: ROOT.joinpath(folder, name) for name in ("epp", "bbr")}
        self.processes: list[Process] = []
        self.pickers: dict[str, gie_gateway.Picker] = {}
        bbr, self.bbr_port = gie_gateway.upstream_bbr(self.bins["bbr"], cluster.kubeconfig, cluster.log_dir,
                                                      namespace=kubectl.namespace)
        self._start(bbr)
        for deployment, service in MODELS.items():
            epp, self.pickers[service] = gie_gateway.upstream_epp(
                self.bins["epp"], cluster.kubeconfig, cluster.log_dir, pool=deployment, namespace=kubectl.namespace)
            self._start(epp)
        ours, self.pickers[SHARDWISE_PICKER] = gie_gateway.shardwise_picker(
            cluster.kubeconfig, cluster.log_dir, namespace=kubectl.namespace)
        self._start(ours)
        self.envoy = gie_gateway.Envoy(cluster.log_dir, f"gie-{kubectl.namespace}")

    def _start(self, process: Process) -> None:
        self.processes.append(process)
        process.start()

    def translate(self) -> dict[str, Any]:
        """The Envoy bootstrap for the HTTPRoutes and pools as they are now."""
        routes = self.kubectl.get("httproute")["items"]
        pools = self.kubectl.get("inferencepool")["items"]
        return gie_gateway.gateway_config(routes, pools, self.pickers, port=self.envoy.port,
                                          admin_port=self.envoy.admin_port, bbr_port=self.bbr_port)

    def reload(self) -> None:
        self.envoy.stop()
        self.envoy.start(self.translate())

    def stop(self) -> None:
        self.envoy.stop()
        for process in reversed(self.processes):
            process.stop()


def _answers(ip: str) -> bool:
    try:
        return httpx.get(f"http://{ip}:8000/metrics", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _serving_ips(kubectl: Kubectl, name: str, count: int) -> list[str]:
    """The deployment's pod IPs once exactly `count` pods are Ready and their engines answer (the
    simulated fleet starts an engine shortly after KWOK reports its pod)."""
    pods = (kubectl.get("pods", selector=f"{LABEL}={name}") or {}).get("items") or []
    ready = [p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")
             and p["status"].get("podIP")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
    return sorted(ready) if len(ready) == count and all(map(_answers, ready)) else []


def _served(ip: str) -> float:
    """Requests this engine has finished (its own vllm:request_success_total)."""
    text = httpx.get(f"http://{ip}:8000/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


@pytest.fixture(scope="module")
def gateway(cluster: LocalCluster, operator: OperatorProcess, routing_crds: None) -> Iterator[Gateway]:
    namespace = f"gie-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    sim = simulated_fleet(cluster, namespace, "gie")
    sim.start()
    gateway: Gateway | None = None
    try:
        for name, picker in MODELS.items():
            kubectl.apply_yaml(_manifest(name, picker))
        for name in MODELS:
            eventually(lambda: kubectl.get("httproute", name) and kubectl.get("inferencepool", name),
                       timeout=90, what=f"{name}'s pool and route")
            eventually(lambda: _serving_ips(kubectl, name, 1), timeout=120, what=f"{name} serving")
        gateway = Gateway(cluster, kubectl)
        gateway.reload()
        yield gateway
    finally:
        if gateway is not None:
            gateway.stop()
        sim.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.envoy.base_url, api_key="unused", max_retries=0, timeout=30)


def _ask(client: openai.OpenAI, model: str, prompt: str = "Say hello.") -> str:
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=8)
    assert reply.choices[0].message.content
    return reply.model


def test_an_openai_client_reaches_each_model_through_bbr_and_the_upstream_picker(gateway: Gateway) -> None:
    client = _client(gateway)
    translated = gateway.translate()
    routes = translated["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert len(routes["route_config"]["virtual_hosts"][0]["routes"]) == len(MODELS)  # one per HTTPRoute
    for name in MODELS:
        [ip] = _serving_ips(gateway.kubectl, name, 1)
        before = _served(ip)
        # The first request may meet a picker that has not yet read the pod's metrics: it answers 503.
        answered = eventually(lambda: _ask(client, f"{name}-served"), timeout=60, interval=1,
                              what=f"{name} answered through the GIE gateway")
        assert answered == f"{name}-served"
        assert _served(ip) > before  # the engine of that deployment answered it
    # A model no HTTPRoute names matches no route: the gateway's own 404, before any picker.
    with pytest.raises(openai.NotFoundError):
        _ask(client, "no-such-model")


def test_scaling_a_deployment_gives_the_upstream_picker_its_new_pod(gateway: Gateway) -> None:
    kubectl, name = gateway.kubectl, "gie-a"
    pool = kubectl.get("inferencepool", name)["metadata"]
    kubectl.run("patch", "infd", name, "--type=merge", "-p", json.dumps({"spec": {"replicas": 2}}))
    ips = eventually(lambda: _serving_ips(kubectl, name, 2), timeout=120, what="two serving pods")
    after = kubectl.get("inferencepool", name)["metadata"]
    assert (after["generation"], after["resourceVersion"]) == (pool["generation"], pool["resourceVersion"])
    client = _client(gateway)

    def both_serve() -> bool:
        before = {ip: _served(ip) for ip in ips}
        # Concurrent, distinct prompts: the picker's queue and KV scorers see load on the busy pod.
        with ThreadPoolExecutor(8) as pool_:
            list(pool_.map(lambda i: _ask(client, f"{name}-served", f"question {i} {uuid.uuid4()}"), range(24)))
        return all(_served(ip) > before[ip] for ip in ips)

    eventually(both_serve, timeout=90, interval=1, what="requests reaching both pods of the scaled deployment")
    kubectl.run("patch", "infd", name, "--type=merge", "-p", json.dumps({"spec": {"replicas": 1}}))
    eventually(lambda: _serving_ips(kubectl, name, 1), timeout=120, what="back to one pod")


def test_pools_pointed_at_shardwise_picker_serve_the_same_requests(gateway: Gateway) -> None:
    kubectl = gateway.kubectl
    for name in MODELS:
        kubectl.apply_yaml(_manifest(name, SHARDWISE_PICKER))
    eventually(lambda: all(kubectl.get("inferencepool", n)["spec"]["endpointPickerRef"]["name"] == SHARDWISE_PICKER
                           for n in MODELS), timeout=30, what="pools naming shardwise's picker")
    gateway.reload()
    clusters = {c["name"] for c in gateway.translate()["static_resources"]["clusters"]}
    assert f"picker-{SHARDWISE_PICKER}" in clusters and not {f"picker-{s}" for s in MODELS.values()} & clusters
    client = _client(gateway)
    for name in MODELS:
        answered = eventually(lambda: _ask(client, f"{name}-served"), timeout=60, interval=1,
                              what=f"{name} answered through shardwise's picker")
        assert answered == f"{name}-served"
