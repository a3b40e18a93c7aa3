"""Prefill/decode disaggregation on the REAL vLLM 0.32 CPU engine, from the operator's own argv.

The operator renders an InferenceDeployment with `spec.disaggregation` (ExampleConnector over a
shared folder) into a prefill and a decode Deployment; each role's container runs here exactly
as the local fleet runs a pod (shardwise_runtime.sim.real.real_launch: the installed engine, the
tiny model, the pod IP as --host, the CPU settings, every change logged), each on a loopback
address of its own as if in its own pod, with the shared claim's path on the host's disk. A
third engine is the aggregated rendering of the same spec (disaggregation off).

The hand-off follows vLLM's proxy protocol (SERVING-SHAPES.md C): the prompt to the prefill
engine with max_tokens 1, then the same request to the decode engine. Proven: the prefill engine
writes the prompt's KV blocks as files, the decode engine logs "External Cache Hit!" for that
request, and its greedy output equals the aggregated engine's. Not through the gateway (its P/D
routing is not built yet) and not through the control plane (the controller does not report the
roles yet): see docs/disaggregation.md.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import socket
import urllib.request
from typing import Any

import pytest
from shardwise_runtime.sim import real

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.devcluster.processes import Process, wait_until
from shardwise.render import children
from tests.e2e import real_engine_support as rs

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(2400)]

OWNER = children.Owner(name="tiny", namespace="ns", uid="u")
# Three engines compiling at once on two shared cores: minutes each (observed ~6).
START_TIMEOUT_S = 1500
# The connector hands over whole blocks only (it aligns len(prompt) - 1 down to a block; the CPU
# engine's block is 128 tokens here, /metrics cache_config_info): ~370 tokens of the tiny
# tokenizer, so two blocks travel.
PROMPT = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
          "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, item):\n"
          "        self.items.append(item)\n") * 3


def _spec(kv: pathlib.Path, disaggregation: bool) -> InferenceDeploymentSpec:
    body: dict[str, Any] = {
        "model": {"name": "shardwise/tiny-llama", "servedName": "tiny", "dtype": "bfloat16"},
        "serving": {"maxModelLen": 512, "maxConcurrency": 4, "image": real.LOCAL_VLLM_CPU_IMAGE}}
    if disaggregation:
        body["disaggregation"] = {"mode": "Disaggregated", "connector": "ExampleConnector",
                                  "sharedStorage": {"claimName": "kv", "path": str(kv)}}
    return InferenceDeploymentSpec.model_validate(body)


def _plan() -> dict[str, Any]:
    return {"feasible": True, "tensorParallel": 1, "pipelineParallel": 1, "gpusPerReplica": 1, "nodesPerReplica": 1,
            "gpusPerNode": 1, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch",
            "memory": {"weightsGiBPerGPU": 0.01}}


def _deployments(spec: InferenceDeploymentSpec) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in children.render(OWNER, spec, _plan(), 1) if o["kind"] == "Deployment"}


def _free_loopback() -> str:
    """A loopback address whose port 8000 is free: a pod IP of its own (every pod listens on 8000)."""
    for _ in range(100):
        host = f"127.39.{random.randint(1, 254)}.{random.randint(1, 254)}"
        with socket.socket() as probe:
            try:
                probe.bind((host, 8000))
            except OSError:
                continue
            return host
    raise RuntimeError("no free loopback address with port 8000")


def _launch(deployment: dict[str, Any], install: real.Install, log: pathlib.Path) -> tuple[Process, str]:
    host = _free_loopback()
    pod = {"metadata": {"name": deployment["metadata"]["name"], "namespace": "ns"},
           "spec": deployment["spec"]["template"]["spec"], "status": {"podIP": host}}
    launch = real.real_launch(pod, install, base_env={k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ},
                              cpus=os.cpu_count() or 1)
    assert launch is not None
    # Anything the fleet changed goes to the engine's log, as the fleet does.
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("--- changed from the rendered container: " + "; ".join(launch.changes) + "\n")
    process = Process(deployment["metadata"]["name"], list(launch.argv), log, env=dict(launch.env))
    process.start()
    return process, f"http://{host}:8000"


def _healthy(base: str) -> bool:
    with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
        return response.status == 200


def _complete(base: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": PROMPT, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True}
    request = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def _metrics(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return response.read().decode()


def _sample(text: str, name: str, label: str = "") -> float:
    """The value of the first sample of `name` whose labels contain `label`."""
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _block_size(text: str) -> int:
    line = next(x for x in text.splitlines() if x.startswith("vllm:cache_config_info{"))
    return int(line.split('block_size="', 1)[1].split('"', 1)[0])


def _serve_args(deployment: dict[str, Any]) -> list[str]:
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_prefill_hands_kv_to_decode_through_the_example_connector(tmp_path: pathlib.Path) -> None:
    home = rs.install_real_engine()
    install = real.Install(home=home, launcher="shardwise-launch")
    kv = tmp_path / "kv"
    kv.mkdir()
    roles = _deployments(_spec(kv, disaggregation=True))
    aggregated = _deployments(_spec(kv, disaggregation=False))["tiny"]
    prefill_args, decode_args = _serve_args(roles["tiny-prefill"]), _serve_args(roles["tiny-decode"])
    assert json.loads(prefill_args[prefill_args.index("--kv-transfer-config") + 1])["kv_role"] == "kv_producer"
    assert json.loads(decode_args[decode_args.index("--kv-transfer-config") + 1])["kv_role"] == "kv_consumer"
    assert "--kv-transfer-config" not in _serve_args(aggregated)

    logs = tmp_path / "logs"
    started: list[tuple[Process, str]] = []
    try:
        for deployment, log in ((roles["tiny-prefill"], "prefill.log"), (roles["tiny-decode"], "decode.log"),
                                (aggregated, "aggregated.log")):
            started.append(_launch(deployment, install, logs / log))
        (prefill, p_url), (decode, d_url), (plain, a_url) = started
        for process, url in started:
            wait_until(lambda url=url: _healthy(url), timeout=START_TIMEOUT_S, interval=2.0,
                       what=f"{process.name} /health", process=process)

        first = _complete(p_url, max_tokens=1)  # vLLM's proxy: prefill stops after one token
        assert first["usage"]["completion_tokens"] == 1
        prompt_tokens = first["usage"]["prompt_tokens"]
        saved = sorted(p.name for p in kv.rglob("*.safetensors"))
        assert saved, f"the prefill engine saved no KV under {kv}:\n{prefill.log_tail()}"

        hits_before = decode.log_path.read_text(errors="replace").count("External Cache Hit!")
        metrics = _metrics(d_url)
        external = 'source="external_kv_transfer"'
        before = _sample(metrics, "vllm:prompt_tokens_by_source_total", external)
        block = _block_size(metrics)
        handed = _complete(d_url, max_tokens=16)
        wait_until(lambda: decode.log_path.read_text(errors="replace").count("External Cache Hit!") > hits_before,
                   timeout=60, what="the decode engine's 'External Cache Hit!' log line", process=decode)
        # Every whole block of the prompt but the last token's came from the prefill engine's KV.
        loaded = _sample(_metrics(d_url), "vllm:prompt_tokens_by_source_total", external) - before
        assert loaded == (prompt_tokens - 1) // block * block >= 2 * block, (loaded, prompt_tokens, block)
        alone = _complete(a_url, max_tokens=16)
        assert handed["usage"]["prompt_tokens"] == prompt_tokens
        assert handed["choices"][0]["text"] == alone["choices"][0]["text"], (handed, alone)
        assert handed["usage"]["completion_tokens"] == alone["usage"]["completion_tokens"] == 16
    finally:
        for process, _ in started:
            process.stop(timeout=60)
