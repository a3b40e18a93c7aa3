"""`shardwise plan` refuses the strings admission refuses (issue 25), with the same sentence.

The expected message is the pydantic models' (the CRD's CEL rules say the same, checked in
tests/e2e/test_validation_strings.py), so offline files and the API server cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest
import yaml
from shardwise_runtime.sim.hub_thread import HubThread

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.planner import cli

NODES = Path(__file__).resolve().parents[2] / "fixtures/nodes/h100-nvswitch-2x8.yaml"
BASE = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}


@pytest.fixture(autouse=True)
def empty_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A hub with nothing in it: a name that reached the hub would fail with the hub's 404, not
    with the rule's sentence the tests expect."""
    (tmp_path / "hub").mkdir()
    with HubThread(tmp_path / "hub") as local:
        monkeypatch.setenv("HF_ENDPOINT", local.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        yield


# The fixture nodes are KWOK's, tainted.
PLACEMENT = {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}


def spec(model: dict | None = None, **serving) -> dict:
    return {"model": model or BASE["model"], "placement": PLACEMENT, **({"serving": serving} if serving else {})}


# (case, spec, the field `shardwise plan` names)
BAD = [
    ("leading space", spec({"name": " meta-llama/Llama-3.1-8B-Instruct"}), "spec.model.name"),
    ("command substitution", spec({"name": "$(curl x)/Llama-3.1-8B-Instruct"}), "spec.model.name"),
    ("backticks and an architecture", spec({"name": "`uname`/Llama", "architecture": {
        "parameters": 8_000_000_000, "layers": 32, "hiddenSize": 4096, "attentionHeads": 32}}), "spec.model.name"),
    ("hub URL", spec({"name": "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"}), "spec.model.name"),
    ("double dash", spec({"name": "meta-llama/Llama--3"}), "spec.model.name"),
    ("image with a trailing space", spec(image="vllm/vllm-openai:v0.32.0 "), "spec.serving.image"),
    ("image digest too short", spec(image="vllm/vllm-openai@sha256:12"), "spec.serving.image"),
    ("data-parallel size", spec(extraArgs=["--data-parallel-size", "4"]), "spec.serving.extraArgs[0]"),
    ("shell tokens", spec(extraArgs=["--enforce-eager", "&&", "sh", "-c", "x"]), "spec.serving.extraArgs[1]"),
    ("several flags in one item", spec(extraArgs=["--enable-prefix-caching --max-num-batched-tokens 8192"]),
     "spec.serving.extraArgs[0]"),
    ("unknown flag", spec(extraArgs=["--max-num-batch-tokens", "8192"]), "spec.serving.extraArgs[0]"),
    ("value after a switch", spec(extraArgs=["--enable-prefix-caching", "8192"]), "spec.serving.extraArgs"),
    ("flag without its value", spec(extraArgs=["--max-num-batched-tokens"]), "spec.serving.extraArgs"),
]


def _pydantic_message(body: dict) -> str:
    with pytest.raises(pydantic.ValidationError) as raised:
        InferenceDeploymentSpec.model_validate(body)
    return raised.value.errors()[0]["msg"].removeprefix("Value error, ")


@pytest.mark.parametrize("case,body,field", BAD, ids=[c[0] for c in BAD])
def test_plan_refuses_with_the_models_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                               body: dict, field: str) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                                    "metadata": {"name": "x"}, "spec": body}))
    assert cli.main(["plan", "-f", str(path), "--nodes", str(NODES)]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == f"error: {field}: {_pydantic_message(body)}\n", case


def test_a_valid_spec_with_args_and_an_image_still_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": spec(
        image="shardwise.local/vllm-cpu:0.32.0", extraArgs=["--enable-prefix-caching", "-O3", "--seed", "-1"])}))
    assert cli.main(["plan", "-f", str(path), "--nodes", str(NODES)]) == cli.EXIT_FEASIBLE, capsys.readouterr().err
