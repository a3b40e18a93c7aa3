"""hack/make-tiny-lora.py: a PEFT-format adapter with the tensor names and shapes vLLM expects."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "make-tiny-lora.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tiny_lora", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_tiny_lora = _script()


def _header(path: Path) -> tuple[dict[str, Any], bytes]:
    """The safetensors JSON header and the data after it, read as the format specifies."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def test_default_adapter_matches_the_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "a1"
    assert make_tiny_lora.main(["--out", str(out), "--rank", "8"]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert config["target_modules"] == ["q_proj", "v_proj"]
    assert config["lora_dropout"] == 0 and config["bias"] == "none"
    assert config["base_model_name_or_path"]

    header, data = _header(out / "adapter_model.safetensors")
    assert header.pop("__metadata__") == {"format": "pt"}
    expected = {}
    for layer in range(4):
        prefix = f"base_model.model.model.layers.{layer}.self_attn"
        expected[f"{prefix}.q_proj.lora_A.weight"] = [8, 256]
        expected[f"{prefix}.q_proj.lora_B.weight"] = [256, 8]  # 4 heads x 64
        expected[f"{prefix}.v_proj.lora_A.weight"] = [8, 256]
        expected[f"{prefix}.v_proj.lora_B.weight"] = [128, 8]  # 2 KV heads x 64
    assert {name: entry["shape"] for name, entry in header.items()} == expected
    assert all(entry["dtype"] == "F32" for entry in header.values())
    end = max(entry["data_offsets"][1] for entry in header.values())
    assert end == len(data) == sum(4 * a * b for a, b in expected.values())
    begin, stop = header["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"][
        "data_offsets"
    ]
    b_values = struct.unpack(f"<{(stop - begin) // 4}f", data[begin:stop])
    assert any(value != 0.0 for value in b_values)  # a zero B would leave the base model unchanged


def test_base_config_targets_and_seed(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 128,
                "intermediate_size": 384,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
            }
        )
    )
    argv = [
        "--rank",
        "4",
        "--base",
        str(base),
        "--targets",
        "k_proj,o_proj,down_proj",
        "--seed",
        "3",
    ]
    assert make_tiny_lora.main(["--out", str(tmp_path / "x"), *argv]) == 0
    assert make_tiny_lora.main(["--out", str(tmp_path / "y"), *argv]) == 0
    assert make_tiny_lora.main(["--out", str(tmp_path / "z"), *argv[:-1], "4"]) == 0
    header, _ = _header(tmp_path / "x" / "adapter_model.safetensors")
    shapes = {name: entry["shape"] for name, entry in header.items() if name != "__metadata__"}
    assert len(shapes) == 2 * 3 * 2
    layer = "base_model.model.model.layers.1"
    assert shapes[f"{layer}.self_attn.k_proj.lora_B.weight"] == [
        64,
        4,
    ]  # 1 KV head x head_dim 128/2
    assert shapes[f"{layer}.self_attn.o_proj.lora_A.weight"] == [4, 128]
    assert shapes[f"{layer}.mlp.down_proj.lora_A.weight"] == [4, 384]
    assert shapes[f"{layer}.mlp.down_proj.lora_B.weight"] == [128, 4]
    weights = [(tmp_path / d / "adapter_model.safetensors").read_bytes() for d in "xyz"]
    assert weights[0] == weights[1] != weights[2]
    assert json.loads((tmp_path / "x" / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ] == str(base)


def test_unknown_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_tiny_lora.main(["--out", str(tmp_path / "a"), "--targets", "lm_head"]) == 2
    assert "unknown target module" in capsys.readouterr().err


def test_safetensors_reads_it_when_installed(tmp_path: Path) -> None:
    safe_open = pytest.importorskip("safetensors").safe_open
    make_tiny_lora.main(["--out", str(tmp_path / "a"), "--rank", "16"])
    with safe_open(str(tmp_path / "a" / "adapter_model.safetensors"), framework="numpy") as handle:
        tensor = handle.get_tensor("base_model.model.model.layers.3.self_attn.v_proj.lora_B.weight")
    assert list(tensor.shape) == [128, 16]
