"""The downloader's check that an adapter fits its base model (vLLM loads a misfit and serves garbage)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from shardwise_runtime.download import lora_check

ROOT = pathlib.Path(__file__).resolve().parents[3]
TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64}


def adapter(folder: pathlib.Path, base: dict | None = None, targets: str = "q_proj,v_proj") -> pathlib.Path:
    args = [sys.executable, str(ROOT / "hack/make-tiny-lora.py"), "--out", str(folder), "--targets", targets]
    if base is not None:
        (folder.parent / "other.json").write_text(json.dumps(base))
        args += ["--base", str(folder.parent / "other.json")]
    subprocess.run(args, check=True, capture_output=True, timeout=60)
    return folder


def base(folder: pathlib.Path, config: dict) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_an_adapter_of_this_base_fits(tmp_path: pathlib.Path) -> None:
    made = adapter(tmp_path / "a", targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    assert lora_check.problem(made, base(tmp_path / "model", TINY)) is None


def test_another_bases_widths_or_layers_are_named(tmp_path: pathlib.Path) -> None:
    narrow = adapter(tmp_path / "narrow", {**TINY, "hidden_size": 128, "head_dim": 32})
    found = lora_check.problem(narrow, base(tmp_path / "model", TINY))
    assert found is not None and "another base model" in found and "256" in found
    deeper = adapter(tmp_path / "deeper", {**TINY, "num_hidden_layers": 8})
    found = lora_check.problem(deeper, base(tmp_path / "model", TINY))
    assert found is not None and "4 layers" in found


def test_nothing_to_compare_is_no_verdict(tmp_path: pathlib.Path) -> None:
    made = adapter(tmp_path / "a")
    assert lora_check.problem(made, tmp_path / "no-model") is None
    (tmp_path / "bin").mkdir()
    assert lora_check.problem(tmp_path / "bin", base(tmp_path / "model", TINY)) is None


def test_the_rank_is_read_from_adapter_config(tmp_path: pathlib.Path) -> None:
    made = adapter(tmp_path / "a")
    assert lora_check.rank(made) == 8
    (made / "adapter_config.json").write_text('{"r": "eight"}')
    assert lora_check.rank(made) is None
    assert lora_check.rank(tmp_path / "none") is None
