"""Writes a tiny random LoRA adapter for the project's tiny Llama (hack/make-tiny-model.py) in
PEFT's on-disk format, which vLLM loads: `adapter_config.json` and `adapter_model.safetensors`.

Standard library only (the project's venv has neither torch nor numpy): the safetensors file is an
8-byte header length, a JSON header and raw little-endian float32 data, as the format specifies.
lora_A is drawn like PEFT's kaiming-uniform init; lora_B is random too, not PEFT's zeros, so the
adapter changes the base model's answers (a zero B would be the base model exactly). Same seed,
same bytes.

Tensor names are PEFT's for LlamaForCausalLM, without an adapter name:
    base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight
    base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight
with lora_A [r, in_features] and lora_B [out_features, r].

Usage: python make-tiny-lora.py --out DIR [--rank 8] [--alpha 16] [--seed 0]
                                [--base MODEL_DIR_OR_CONFIG] [--targets q_proj,v_proj]
"""

from __future__ import annotations

import argparse
import array
import json
import math
import pathlib
import random
import struct
import sys
from collections.abc import Mapping, Sequence
from typing import Any

# The tiny model's config.json fields that shape an adapter (make-tiny-model.py).
TINY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
TINY_NAME = "shardwise/tiny-llama"
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
# B's spread: the delta B.A.x is then of the order of the base's own q/v outputs (its weights are
# drawn with std 0.02), enough to change greedy answers rather than round away in bfloat16.
B_STD = 0.1


def read_base(base: pathlib.Path | None) -> dict[str, int]:
    """The shape fields of a base model's config.json (its folder or the file), else the tiny's."""
    if base is None:
        return dict(TINY)
    path = base / "config.json" if base.is_dir() else base
    config = json.loads(path.read_text(encoding="utf-8"))
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return {
        "hidden_size": hidden,
        "intermediate_size": int(config["intermediate_size"]),
        "num_hidden_layers": int(config["num_hidden_layers"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or hidden // heads),
    }


def features(config: Mapping[str, int], target: str) -> tuple[int, int]:
    """(in_features, out_features) of one Llama projection."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    shapes = {
        "q_proj": (hidden, q),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (q, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    if target not in shapes:
        raise ValueError(f"unknown target module {target!r}: one of {', '.join(shapes)}")
    return shapes[target]


def tensor_shapes(
    config: Mapping[str, int], rank: int, targets: Sequence[str]
) -> dict[str, list[int]]:
    """Every tensor the adapter holds, name -> shape, in PEFT's naming."""
    shapes: dict[str, list[int]] = {}
    for layer in range(config["num_hidden_layers"]):
        for target in targets:
            block = "self_attn" if target in ATTENTION else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{target}"
            fan_in, fan_out = features(config, target)
            shapes[f"{prefix}.lora_A.weight"] = [rank, fan_in]
            shapes[f"{prefix}.lora_B.weight"] = [fan_out, rank]
    return shapes


def _values(name: str, shape: Sequence[int], rng: random.Random) -> array.array[float]:
    count = math.prod(shape)
    if ".lora_A." in name:
        bound = 1 / math.sqrt(shape[1])  # kaiming-uniform with a=sqrt(5), as PEFT draws A
        data = array.array("f", (rng.uniform(-bound, bound) for _ in range(count)))
    else:
        data = array.array("f", (rng.gauss(0.0, B_STD) for _ in range(count)))
    if sys.byteorder != "little":
        data.byteswap()  # safetensors is little-endian
    return data


def write_safetensors(path: pathlib.Path, shapes: Mapping[str, list[int]], seed: int) -> None:
    """float32 tensors of `shapes`, drawn from `seed`, in the safetensors layout."""
    rng = random.Random(seed)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(shapes):
        blob = _values(name, shapes[name], rng).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": shapes[name],
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(encoded)) + encoded)
        for blob in blobs:
            out.write(blob)


def adapter_config(base_name: str, rank: int, alpha: int, targets: Sequence[str]) -> dict[str, Any]:
    """PEFT's adapter_config.json for a plain LoRA on a causal LM."""
    return {
        "base_model_name_or_path": base_name,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "target_modules": list(targets),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


def write_adapter(
    out: pathlib.Path,
    *,
    rank: int = 8,
    alpha: int | None = None,
    seed: int = 0,
    base: pathlib.Path | None = None,
    targets: Sequence[str] = ("q_proj", "v_proj"),
) -> None:
    """The adapter folder `out`: adapter_config.json and adapter_model.safetensors."""
    if rank < 1:
        raise ValueError("--rank must be >= 1")
    config = read_base(base)
    shapes = tensor_shapes(config, rank, targets)
    out.mkdir(parents=True, exist_ok=True)
    base_name = str(base) if base is not None else TINY_NAME
    settings = adapter_config(base_name, rank, alpha if alpha is not None else 2 * rank, targets)
    (out / "adapter_config.json").write_text(
        json.dumps(settings, indent=2) + "\n", encoding="utf-8"
    )
    write_safetensors(out / "adapter_model.safetensors", shapes, seed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, required=True, help="adapter folder to write")
    parser.add_argument("--rank", type=int, default=8, help="r (default 8)")
    parser.add_argument("--alpha", type=int, default=None, help="lora_alpha (default 2 * rank)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--base",
        type=pathlib.Path,
        default=None,
        help="base model folder or its config.json (default: the tiny model's shape)",
    )
    parser.add_argument("--targets", default="q_proj,v_proj", help="comma-separated projections")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    try:
        write_adapter(
            args.out,
            rank=args.rank,
            alpha=args.alpha,
            seed=args.seed,
            base=args.base,
            targets=targets,
        )
    except (ValueError, OSError, KeyError) as error:
        print(f"make-tiny-lora: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: rank {args.rank}, targets {','.join(targets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
