"""A model the catalog lacks, planned by the operator from its own config.json on a local hub.

The hub-compatible server (runtime/shardwise_runtime/sim/hub.py) serves the published config.json
of Qwen/Qwen3-32B (tests/fixtures/hub-configs, with its source); the spec names only the repo.
A repo the hub does not have is a Planned=False condition with the hub's answer, nothing created.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Iterator

import pytest
import yaml

from shardwise_runtime.sim.hub_thread import HubThread
from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually

pytestmark = pytest.mark.e2e
CONFIGS = ROOT / "tests/fixtures/hub-configs"


@pytest.fixture
def hub(tmp_path: pathlib.Path) -> Iterator[HubThread]:
    shutil.copytree(CONFIGS / "Qwen/Qwen3-32B", tmp_path / "hub/Qwen/Qwen3-32B")
    with HubThread(tmp_path / "hub") as local:
        yield local


def manifest(name: str, repo: str, hub: str) -> str:
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": name},
                           "spec": {"model": {"name": repo, "cache": {"mode": "None", "hubEndpoint": hub}},
                                    "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
                                    "parallelism": {"objective": "Cost"},
                                    "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}, "replicas": 1}})


def test_a_model_is_planned_from_its_own_config_and_a_missing_repo_is_said(
        operator: OperatorProcess, kubectl: Kubectl, hub: HubThread) -> None:
    kubectl.apply_yaml(manifest("qwen3", "Qwen/Qwen3-32B", hub.url))
    kubectl.apply_yaml(manifest("nowhere", "Qwen/Qwen3-999B", hub.url))
    plan = eventually(lambda: ((kubectl.get("infd", "qwen3").get("status") or {}).get("plan") or {}),
                      timeout=90, what="a plan for Qwen3-32B")
    assert plan["feasible"], plan.get("reason")
    config = json.loads((CONFIGS / "Qwen/Qwen3-32B/config.json").read_text())
    arch = plan["architecture"]
    assert (arch["layers"], arch["hiddenSize"], arch["kvHeads"]) == (
        config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"])
    assert "config.json" in arch["source"]
    eventually(lambda: kubectl.get("deployment", "qwen3"), timeout=60, what="its Deployment")

    planned = eventually(lambda: next((c for c in (kubectl.get("infd", "nowhere").get("status") or {})
                                       .get("conditions") or [] if c["type"] == "Planned"), None),
                         timeout=90, what="Planned on the missing repo")
    assert planned["status"] == "False" and planned["reason"] == "ModelNotFound", planned
    assert "Qwen/Qwen3-999B" in planned["message"]
    assert kubectl.get("deployment", "nowhere") in (None, {})
