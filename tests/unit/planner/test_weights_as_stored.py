"""Weights as stored: spec.model.dtype auto (the default) plans a checkpoint in its own format, the
quantization_config's (FP8, MXFP4, AWQ, GPTQ) else torch_dtype, because vLLM loads it so whatever
--dtype says. Published checkpoints, with their provenance: tests/fixtures/checkpoints/ (README)
and tests/fixtures/hub-configs/."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from planner_builders import h100_node, node, spec
from shardwise import planner
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import progress
from shardwise.planner import cli, hfconfig, memory
from shardwise.render import children
from shardwise_runtime import vllm_flags

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEEPSEEK = FIXTURES / "checkpoints/deepseek-ai/DeepSeek-V3"
# repo -> its folder: config.json, and the checkpoint's bytes as checkpoint.json (or .hub.json) records them
CHECKPOINTS = {
    "deepseek-ai/DeepSeek-V3": DEEPSEEK,
    "Qwen/Qwen3-32B-AWQ": FIXTURES / "checkpoints/Qwen/Qwen3-32B-AWQ",
    "Qwen/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4": FIXTURES / "checkpoints/Qwen/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4",
    "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8": FIXTURES / "checkpoints/Qwen/Qwen3-30B-A3B-Thinking-2507-FP8",
    "openai/gpt-oss-120b": FIXTURES / "hub-configs/openai/gpt-oss-120b",
    "openai/gpt-oss-20b": FIXTURES / "hub-configs/openai/gpt-oss-20b",
    "Qwen/Qwen3-32B": FIXTURES / "hub-configs/Qwen/Qwen3-32B",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": FIXTURES / "hub-configs/deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "Alibaba-NLP/Tongyi-DeepResearch-30B-A3B": FIXTURES / "hub-configs/Alibaba-NLP/Tongyi-DeepResearch-30B-A3B",
}
H200 = "NVIDIA-H200"
OWNER = children.Owner(name="m", namespace="ns", uid="u")


def help_flags() -> frozenset[str]:
    """The flags of vLLM 0.32's own `serve --help=all`, read from the capture itself."""
    return vllm_flags.parse_help_flags((FIXTURES / "vllm-0.32-cpu/serve-help-all.txt").read_text())


def _config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def _safetensors_bytes(folder: Path) -> float:
    """The checkpoint's bytes, from what was recorded: its files' sizes, every tensor's shape and
    dtype, or the hub's parameters per dtype (x each dtype's width)."""
    meta = folder / "checkpoint.json"
    published = json.loads((meta if meta.exists() else folder / ".hub.json").read_text())["safetensors"]
    if "fileBytes" in published:
        return float(sum(published["fileBytes"]))
    if "tensors" in published:
        width = hfconfig._DTYPE_BYTES
        return float(sum(math.prod(t["shape"]) * width[t["dtype"]] * t["count"] for t in published["tensors"]))
    method = (_config(folder).get("quantization_config") or {}).get("quant_method")
    return hfconfig._metadata_bytes(published["parameters"], method)


@pytest.mark.parametrize("repo", sorted(r for r in CHECKPOINTS if "checkpoints" in str(CHECKPOINTS[r])))
def test_provenance_is_recorded(repo: str) -> None:
    published = json.loads((CHECKPOINTS[repo] / "checkpoint.json").read_text())
    assert published["repo"] == repo and published["copiedOn"]
    assert published["config"]["url"].startswith(f"https://huggingface.co/{repo}/")
    assert "GitHub" in published["config"]["copiedFrom"] or "github.com/" in published["config"]["copiedFrom"]
    assert published["safetensors"]["copiedFrom"]


def test_every_stored_format_is_covered() -> None:
    formats = {hfconfig.stored_format(_config(folder)) for folder in CHECKPOINTS.values()}
    assert {"fp8", "awq", "gptq", "mxfp4", "bfloat16"} <= formats


@pytest.mark.parametrize("repo", sorted(CHECKPOINTS))
def test_planned_weight_bytes_match_the_checkpoint(repo: str) -> None:
    """From config.json alone, with no dtype in the spec: within 5 % of the safetensors bytes."""
    folder = CHECKPOINTS[repo]
    arch = hfconfig.arch_from_config(repo, _config(folder))
    request = planner.request_from_spec(spec(repo), architecture=arch)
    planned = request.arch.parameters * request.bytes_per_weight
    stored = _safetensors_bytes(folder)
    text = hfconfig.text_config(_config(folder))
    if text.get("tie_word_embeddings"):
        stored = min(stored, planned)  # vLLM loads a tied head once, whatever the file stores
    assert planned == pytest.approx(stored, rel=0.05)
    assert request.weights.loaded == hfconfig.stored_format(_config(folder))


def test_deepseek_v3_mla_shapes_from_its_config() -> None:
    arch = hfconfig.arch_from_config("d", _config(DEEPSEEK))
    assert (arch.kv_heads, arch.head_dim) == (1, (512 + 64) // 2)
    assert 660e9 < arch.parameters < 680e9 and 36e9 < arch.active_parameters < 39e9
    assert arch.stored_format == "fp8"


def _plan_cli(tmp_path: Path, model: dict[str, Any], nodes: list[dict[str, Any]],
              capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    deployment = tmp_path / "d.yaml"
    deployment.write_text(yaml.safe_dump({"kind": "InferenceDeployment",
                                          "spec": spec(model["name"], model_fields=model)}))
    listed = tmp_path / "n.yaml"
    listed.write_text(yaml.safe_dump({"kind": "List", "items": nodes}))
    status = cli.main(["plan", "-f", str(deployment), "--nodes", str(listed), *extra])
    return status, capsys.readouterr().out


NODE_SETS = {
    "2 x 8 H100": ([h100_node("a"), h100_node("b")], (8, 2)),
    "8 H200": ([node("h", H200, 8, interconnect="nvswitch", domain=8, bandwidth=900)], (8, 1)),
}


@pytest.mark.parametrize("where", sorted(NODE_SETS))
@pytest.mark.parametrize("from_config", [True, False], ids=["its config.json", "the catalog"])
def test_deepseek_v3_without_dtype_plans_fp8(
    where: str, from_config: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, layout = NODE_SETS[where]
    extra = ["--model-config", str(DEEPSEEK)] if from_config else []
    status, out = _plan_cli(tmp_path, {"name": "deepseek-ai/DeepSeek-V3"}, nodes, capsys, *extra, "-o", "json")
    shown = json.loads(out)
    assert status == 0, shown["reason"]
    assert (shown["tensorParallel"], shown["pipelineParallel"]) == layout
    assert shown["weights"] == {"format": "fp8", "storedFormat": "fp8"}
    # Weights per GPU x GPUs: the FP8 checkpoint's bytes, not twice them.
    total = shown["memory"]["weightsGiBPerGPU"] * layout[0] * layout[1] * memory.GIB
    assert total == pytest.approx(_safetensors_bytes(DEEPSEEK), rel=0.05)


@pytest.mark.parametrize("repo", ["deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b"])
def test_bf16_asked_of_a_quantized_checkpoint_is_reported_and_planned_as_stored(
    repo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = CHECKPOINTS[repo]
    stored = hfconfig.stored_format(_config(folder))
    nodes = [h100_node("a"), h100_node("b")]
    status, out = _plan_cli(tmp_path, {"name": repo, "dtype": "bfloat16"}, nodes, capsys,
                            "--model-config", str(folder))
    assert status == 0
    assert f"WEIGHTS      {stored} (as stored)" in out
    assert "WARNING: spec.model.dtype bfloat16 is not what vLLM loads" in " ".join(out.split())
    arch = hfconfig.arch_from_config(repo, _config(folder))
    asked = planner.request_from_spec(spec(repo, model_fields={"dtype": "bfloat16"}), architecture=arch)
    auto = planner.request_from_spec(spec(repo), architecture=arch)
    assert asked.bytes_per_weight == auto.bytes_per_weight < 2.0
    result = planner.plan(asked, planner.inventory_from_nodes(nodes)).to_dict()
    said = progress.dtype_ignored(result)
    assert (said.type, said.status, said.reason) == ("DtypeIgnored", True, "CheckpointStoredQuantized")
    assert stored in said.message and "bfloat16" in said.message
    assert progress.dtype_ignored(planner.plan(auto, planner.inventory_from_nodes(nodes)).to_dict()).status is False


def test_a_quantized_re_upload_of_a_catalog_model_takes_the_format_its_name_says() -> None:
    request = planner.request_from_spec(spec("Qwen/Qwen2.5-72B-Instruct-AWQ"))
    assert request.weights.loaded == "awq" and request.bytes_per_weight == 0.5
    assert planner.request_from_spec(spec("Qwen/Qwen2.5-72B-Instruct")).weights.loaded == "bfloat16"


def _argv(model: dict[str, Any], weights: dict[str, Any]) -> list[str]:
    s = InferenceDeploymentSpec.model_validate({"model": model})
    plan = {"feasible": True, "tensorParallel": 8, "pipelineParallel": 1, "gpusPerReplica": 8,
            "nodesPerReplica": 1, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3",
            "interconnect": "nvswitch", "weights": weights}
    args = children.build_deployment(OWNER, s, plan, 1)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert vllm_flags.unknown_flags(args[1:], help_flags()) == []
    return args


@pytest.mark.parametrize(("model", "expected"), [
    ({"name": "deepseek-ai/DeepSeek-V3"}, ["--dtype", "auto"]),
    ({"name": "deepseek-ai/DeepSeek-V3", "dtype": "bfloat16"}, ["--dtype", "bfloat16"]),
    ({"name": "Qwen/Qwen2.5-72B-Instruct-AWQ", "quantization": "awq"}, ["--dtype", "auto"]),
    ({"name": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "fp8"}, ["--dtype", "auto", "--quantization", "fp8"]),
    ({"name": "meta-llama/Llama-3.1-70B-Instruct"}, ["--dtype", "auto"]),
])
def test_rendered_precision_flags(model: dict[str, Any], expected: list[str]) -> None:
    """`--quantization` only where it changes what is loaded: fp8 asked of a 16-bit checkpoint."""
    request = planner.request_from_spec(spec(model["name"], model_fields=model))
    args = _argv(model, request.weights.to_dict())
    flags = [a for i, a in enumerate(args) if a in ("--dtype", "--quantization")
             or (i and args[i - 1] in ("--dtype", "--quantization"))]
    assert flags == expected
