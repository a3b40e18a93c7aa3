"""LoRA adapters on the REAL vLLM 0.32 engine (CPU build, tiny model), with no pod restart.

Two rank-8 adapters for the tiny model are written by hack/make-tiny-lora.py into a local
hub-compatible server; the deployment has no weight cache (mode None) and names that hub, so the
operator asks the running engine to load each adapter by its hub id and vLLM fetches it itself
with huggingface_hub (the fleet lifts HF_HUB_OFFLINE only for a hub on this machine). Checked on
the live engine: an adapter is served by name and its greedy output differs from the base
model's; a second adapter added to the spec is served by the same container (same start time,
restart count 0); removing one makes its name 404.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from shardwise_runtime.sim.hub_thread import HubThread
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

from tests.e2e import real_engine_support as rs
from tests.e2e.real_engine_support import real_fleet  # noqa: F401 - a fixture
from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(1500)]

NAME, SERVED = "tiny-lora", "tiny"
SQL, CHAT = "tiny/sql-lora", "tiny/chat-lora"
PROMPT = "The quick brown fox"


def manifest(hub: str, adapters: list[dict[str, Any]]) -> str:
    return json.dumps({
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": NAME},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedName": SERVED,
                           "cache": {"mode": "None", "hubEndpoint": hub}},
                 "serving": {"maxModelLen": 512, "maxConcurrency": 4, "image": LOCAL_VLLM_CPU_IMAGE},
                 "parallelism": {"tensor": 1, "pipeline": 1}, "placement": {"gpuProducts": ["NVIDIA-L40S"]},
                 "lora": {"maxLoraRank": 8, "maxLoras": 2}, "adapters": adapters, "replicas": 1}})


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubThread]:
    home = rs.install_real_engine()
    base = next(p for p in (home / "models").iterdir() if (p / "config.json").is_file())
    root = tmp_path_factory.mktemp("lora-hub")
    for repo, seed in ((SQL, 1), (CHAT, 2)):
        subprocess.run([sys.executable, str(ROOT / "hack/make-tiny-lora.py"), "--out", str(root / repo),
                        "--rank", "8", "--seed", str(seed), "--base", str(base)],
                       check=True, capture_output=True, timeout=60)
    with HubThread(root) as local:
        yield local


def _pod(kubectl: Kubectl) -> dict[str, Any] | None:
    listing = kubectl.get("pods", selector=f"shardwise.io/inference-deployment={NAME}") or {"items": []}
    items = [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]
    return items[0] if len(items) == 1 else None


def _adapters(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in ((kubectl.get("infd", NAME) or {}).get("status") or {}).get("adapters") or []}


def _greedy(ip: str, model: str) -> httpx.Response:
    # ignore_eos: the random tiny model may pick its end token first; logprobs: what it chose from.
    return httpx.post(f"http://{ip}:8000/v1/completions", timeout=120,
                      json={"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                            "ignore_eos": True, "logprobs": 1})


def _output(response: httpx.Response) -> tuple[str, list[str], list[float]]:
    choice = response.json()["choices"][0]
    logprobs = choice.get("logprobs") or {}
    return choice["text"], list(logprobs.get("tokens") or []), [round(v, 4) for v in logprobs.get("token_logprobs") or []]


def _container(pod: dict[str, Any]) -> tuple[str, int, str]:
    status = pod["status"]["containerStatuses"][0]
    started = (status.get("state") or {}).get("running", {}).get("startedAt", "")
    return pod["metadata"]["uid"], int(status.get("restartCount") or 0), started


def test_adapters_served_by_name_added_and_removed_without_a_restart(
        operator: OperatorProcess, kubectl: Kubectl, real_fleet: Any, hub: HubThread) -> None:
    sql = {"name": "sql", "source": {"repo": SQL}}
    kubectl.apply_yaml(manifest(hub.url, [sql]))

    def loaded(names: set[str]) -> bool:
        entries = _adapters(kubectl)
        return set(entries) == names and all(e["reason"] == "Loaded" and e["loadedReplicas"] == 1
                                             for e in entries.values())

    # vLLM needs about two minutes to start on two busy cores, then one adapter loop pass.
    eventually(lambda: loaded({"sql"}), timeout=900, interval=2, what="adapter sql loaded on the real engine")
    pod = _pod(kubectl)
    assert pod is not None
    ip = pod["status"]["podIP"]
    base, tuned = _greedy(ip, SERVED), _greedy(ip, "sql")
    assert base.status_code == tuned.status_code == 200, (base.text, tuned.text)
    assert len(_output(base)[1]) == 12, base.text
    assert _output(_greedy(ip, SERVED)) == _output(base), "greedy decoding repeats itself"
    assert _output(tuned) != _output(base), "the adapter changes the greedy output"
    before = _container(pod)
    assert before[1] == 0 and before[2]

    kubectl.apply_yaml(manifest(hub.url, [sql, {"name": "chat", "source": {"repo": CHAT}}]))
    eventually(lambda: loaded({"sql", "chat"}), timeout=300, interval=2, what="the second adapter loaded")
    chat = _greedy(ip, "chat")
    assert chat.status_code == 200
    assert _output(chat) != _output(base) and _output(chat) != _output(tuned)
    served = {m["id"]: m for m in httpx.get(f"http://{ip}:8000/v1/models", timeout=30).json()["data"]}
    assert served["chat"]["parent"] == SERVED and served["sql"]["parent"] == SERVED

    kubectl.apply_yaml(manifest(hub.url, [{"name": "chat", "source": {"repo": CHAT}}]))
    eventually(lambda: _greedy(ip, "sql").status_code == 404, timeout=300, interval=2,
               what="the removed adapter's name answers 404")
    assert _greedy(ip, "chat").status_code == 200
    eventually(lambda: loaded({"chat"}), timeout=60, interval=1, what="status.adapters without sql")
    after = _pod(kubectl)
    assert after is not None and _container(after) == before, "the same container served throughout"
