"""Models the catalog lacks, planned from their own config.json (published files, with sources,
in tests/fixtures/hub-configs/<org>/<name>/: config.json as the hub serves it, and .hub.json with
the repo, revision and the hub's safetensors metadata: parameters per dtype)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from planner_builders import h100_node, spec
from shardwise import hub, planner
from shardwise.planner import hfconfig, memory, models
from shardwise_runtime.sim.hub_thread import HubThread

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "hub-configs"
REPOS = sorted(str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/*/config.json"))


def _config(repo: str) -> dict[str, Any]:
    return json.loads((ROOT / repo / "config.json").read_text())


def _published(repo: str) -> dict[str, Any]:
    return json.loads((ROOT / repo / ".hub.json").read_text())


def _published_bytes(repo: str) -> float:
    """The weights' bytes from the hub's safetensors metadata (parameters per dtype x width)."""
    method = (_config(repo).get("quantization_config") or {}).get("quant_method")
    return hfconfig._metadata_bytes(_published(repo)["safetensors"]["parameters"], method)


@pytest.fixture(scope="module")
def local_hub() -> Iterator[str]:
    with HubThread(ROOT) as local:
        yield local.url


def test_there_are_a_dozen_fixtures_each_with_its_source() -> None:
    assert len(REPOS) >= 12
    for repo in REPOS:
        source = _published(repo)["source"]
        assert source["repo"] == repo and len(source["revision"]) == 40


@pytest.mark.parametrize("repo", REPOS)
def test_the_shape_count_matches_the_published_count(repo: str) -> None:
    """From config.json alone (no metadata) the parameter count is within 5 % of the hub's."""
    counted = hfconfig.count_parameters(_config(repo)).total
    published = _published(repo)["safetensors"]["total"]
    text = hfconfig.text_config(_config(repo))
    if text.get("tie_word_embeddings") and counted < published * 0.95:
        # A tied checkpoint may store lm_head anyway (Qwen3-0.6B does); the gap is then exactly it.
        assert published - counted == pytest.approx(text["vocab_size"] * text["hidden_size"], rel=1e-3)
    else:  # gpt-oss's published count includes its MXFP4 scales (1 per 32 values): still < 5 %
        assert counted == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("repo", REPOS)
def test_weight_memory_from_the_config_alone_matches_the_published_bytes(repo: str) -> None:
    arch = hfconfig.arch_from_config(repo, _config(repo))
    request = planner.request_from_spec(spec(repo), architecture=arch)
    fit = memory.memory_per_gpu(
        request.arch, bytes_per_weight=request.bytes_per_weight, max_model_len=4096,
        max_concurrency=1, gpu_memory_utilization=0.9, gpu_memory_mib=81559, tp=1, pp=1,
    )
    published = _published_bytes(repo)
    text = hfconfig.text_config(_config(repo))
    if text.get("tie_word_embeddings"):
        # vLLM loads a tied head once, whatever the checkpoint stores.
        published = min(published, fit.weights_gib * memory.GIB)
    assert fit.weights_gib * memory.GIB == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("repo", REPOS)
def test_each_fixture_plans_with_no_architecture_in_the_spec_through_the_local_hub(
    repo: str, local_hub: str, tmp_path: Path
) -> None:
    model_spec = {"name": repo}
    files = hub.HubFiles(repo, endpoint=local_hub, cache_dir=str(tmp_path))
    if models.lookup_model(repo) is None:
        assert hfconfig.needs_config(model_spec)
        arch = hfconfig.resolve_architecture(model_spec, files)
    else:  # the catalog knows it (Qwen2.5-7B): nothing to read, so read it here to test the path
        assert not hfconfig.needs_config(model_spec)
        config = files.read_json(hfconfig.CONFIG_FILE)
        assert config is not None
        arch = hfconfig.arch_from_config(
            repo, config, safetensors_parameters=files.safetensors_parameters(), where=files.where)
    assert arch is not None and "the hub's safetensors metadata" in arch.source
    request = planner.request_from_spec(spec(repo), architecture=arch)
    result = planner.plan(request, planner.inventory_from_nodes([h100_node("a"), h100_node("b")]))
    assert result.feasible, result.reason
    assert result.memory is not None
    weights = result.memory.model_weights_gib * memory.GIB
    assert weights == pytest.approx(_published_bytes(repo), rel=0.05)


@pytest.mark.parametrize(
    ("repo", "experts", "per_token"),
    [("openai/gpt-oss-120b", 128, 4), ("openai/gpt-oss-20b", 32, 4),
     ("Alibaba-NLP/Tongyi-DeepResearch-30B-A3B", 128, 8)],
)
def test_moe_active_parameters(repo: str, experts: int, per_token: int) -> None:
    """Active = total less the routed experts a token skips: (experts - top-k) x 3 x hidden x
    expert width, per MoE layer, recomputed here from the config's own numbers."""
    config = hfconfig.text_config(_config(repo))
    arch = hfconfig.arch_from_config(repo, _config(repo))
    width = config.get("moe_intermediate_size") or config["intermediate_size"]
    skipped = config["num_hidden_layers"] * (experts - per_token) * 3 * config["hidden_size"] * width
    assert arch.is_moe
    assert arch.active_parameters == pytest.approx(arch.parameters - skipped, rel=1e-6)


def test_a3b_is_about_three_billion_active() -> None:
    """The model card: 30.5B total, 3.3B activated (the "A3B")."""
    arch = hfconfig.arch_from_config("t", _config("Alibaba-NLP/Tongyi-DeepResearch-30B-A3B"))
    assert 3.0e9 < arch.active_parameters < 3.6e9


def test_gpt_oss_sliding_layers_shrink_the_kv_cache() -> None:
    arch = hfconfig.arch_from_config("openai/gpt-oss-120b", _config("openai/gpt-oss-120b"))
    assert (arch.sliding_window, arch.sliding_layers) == (128, 18)
    full = arch.kv_elements_per_token() * 8192
    assert arch.kv_elements_per_sequence(8192) == pytest.approx(full * (18 + 18 * 128 / 8192) / 36)
    assert arch.kv_elements_per_sequence(100) == arch.kv_elements_per_token() * 100


def test_qwen_window_switched_off_is_no_window() -> None:
    arch = hfconfig.arch_from_config("q", _config("Qwen/Qwen2.5-7B-Instruct"))
    assert arch.sliding_window is None and arch.sliding_layers == 0


def test_nested_text_config_is_read() -> None:
    arch = hfconfig.arch_from_config("m", _config("mistralai/Magistral-Small-2509"))
    text = _config("mistralai/Magistral-Small-2509")["text_config"]
    assert (arch.layers, arch.hidden_size, arch.kv_heads) == (
        text["num_hidden_layers"], text["hidden_size"], text["num_key_value_heads"])


def test_index_total_size_wins_over_metadata_and_shapes(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(ROOT / "Qwen/Qwen3-32B", folder)
    (folder / hfconfig.INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": 64_000_000_000}}))
    arch = hfconfig.resolve_architecture({"name": "Qwen/Qwen3-32B"}, hub.FolderFiles(folder))
    assert arch is not None and arch.parameters == 32e9 and "total_size" in arch.source


def test_the_spec_still_overrides_the_config() -> None:
    arch = hfconfig.arch_from_config("Qwen/Qwen3-32B", _config("Qwen/Qwen3-32B"))
    request = planner.request_from_spec(
        spec("Qwen/Qwen3-32B", model_fields={"architecture": {"kvHeads": 4}}), architecture=arch)
    assert request.arch.kv_heads == 4 and request.arch.layers == arch.layers
    assert request.arch.source.startswith("spec.model.architecture over config.json")


def test_a_catalog_model_needs_no_config() -> None:
    assert not hfconfig.needs_config({"name": "meta-llama/Llama-3.1-8B-Instruct"})
    full = {"parameters": "7B", "layers": 32, "hiddenSize": 4096, "attentionHeads": 32}
    assert not hfconfig.needs_config({"name": "x/unknown", "architecture": full})


def test_a_gated_repo_needs_the_token(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    shutil.copytree(ROOT / "Qwen/Qwen3-32B", root / "gated-org/Qwen3-32B-private")
    settings = json.loads((root / "gated-org/Qwen3-32B-private/.hub.json").read_text())
    (root / "gated-org/Qwen3-32B-private/.hub.json").write_text(
        json.dumps({**settings, "gated": True, "token": "hf_secret"}))
    repo = "gated-org/Qwen3-32B-private"
    with HubThread(root) as local:
        refused = hub.HubFiles(repo, endpoint=local.url, cache_dir=str(tmp_path / "c1"))
        with pytest.raises(hub.HubError) as caught:
            hfconfig.resolve_architecture({"name": repo}, refused)
        assert caught.value.reason == "GatedModelNeedsToken" and "restricted" in caught.value.message
        wrong = hub.HubFiles(repo, endpoint=local.url, token="hf_wrong", cache_dir=str(tmp_path / "c2"))
        with pytest.raises(hub.HubError) as caught:
            hfconfig.resolve_architecture({"name": repo}, wrong)
        assert caught.value.reason == "GatedModelAccessDenied"
        allowed = hub.HubFiles(repo, endpoint=local.url, token="hf_secret", cache_dir=str(tmp_path / "c3"))
        arch = hfconfig.resolve_architecture({"name": repo}, allowed)
    assert arch is not None and arch.layers == 64
    request = planner.request_from_spec(spec(repo), architecture=arch)
    result = planner.plan(request, planner.inventory_from_nodes([h100_node("a")]))
    assert result.feasible


def test_shardwise_plan_reads_the_hub_and_prints_the_architecture(
    local_hub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml
    from shardwise.planner import cli

    monkeypatch.setenv("HF_ENDPOINT", local_hub)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    deployment = tmp_path / "d.yaml"
    deployment.write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": spec("Qwen/Qwen3-32B")}))
    nodes = tmp_path / "n.yaml"
    nodes.write_text(yaml.safe_dump({"kind": "List", "items": [h100_node("a")]}))
    assert cli.main(["plan", "-f", str(deployment), "--nodes", str(nodes), "-o", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["architecture"]["layers"] == 64 and "Qwen/Qwen3-32B@main" in printed["architecture"]["source"]
    assert cli.main(["plan", "-f", str(deployment), "--nodes", str(nodes)]) == 0
    assert "MODEL        64 layers" in capsys.readouterr().out
    missing = tmp_path / "m.yaml"
    missing.write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": spec("nobody/nothing")}))
    assert cli.main(["plan", "-f", str(missing), "--nodes", str(nodes)]) == 1
    assert "Repository Not Found" in capsys.readouterr().err


def test_model_config_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml
    from shardwise.planner import cli

    deployment = tmp_path / "d.yaml"
    deployment.write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": spec("openai/gpt-oss-20b")}))
    nodes = tmp_path / "n.yaml"
    nodes.write_text(yaml.safe_dump({"kind": "List", "items": [h100_node("a")]}))
    folder = str(ROOT / "openai/gpt-oss-20b")
    assert cli.main(["plan", "-f", str(deployment), "--nodes", str(nodes), "--model-config", folder,
                     "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["architecture"]
    assert shown["quantization"] == "mxfp4" and shown["slidingLayers"] == 12
