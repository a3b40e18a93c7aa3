"""Does a downloaded LoRA adapter fit its base model? Checked before the adapter counts as verified.

vLLM 0.32 does not check: an adapter made for another base (other widths) loads with "Success"
and serves garbage (tried on the real CPU engine with a hidden-128 adapter on the hidden-256 tiny
Llama). So the downloader compares every tensor of `adapter_model.safetensors` with the base
model's config.json, already in the same cache claim: a PEFT tensor
`...layers.{i}.{self_attn|mlp}.{module}.lora_A.weight` is [r, in] and `lora_B` is [out, r], with
in and out the projection's widths in the base, and i below its layer count. Only the
safetensors header is read (its first bytes), never the weights.
"""

from __future__ import annotations

import json
import pathlib
import re
import struct
from typing import Any

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
_TENSOR = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.\w+)?\.weight$")
_HEADER_LIMIT = 100 << 20  # safetensors' own limit on a header


def widths(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) of each projection of a Llama-style decoder layer."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    kv = int(config.get("num_key_value_heads") or heads) * head_dim
    q, inter = heads * head_dim, int(config.get("intermediate_size") or 0)
    out = {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden)}
    if inter:
        out.update({"gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden)})
    return out


def read_header(path: pathlib.Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > _HEADER_LIMIT:
            raise ValueError(f"{path.name}: a {length}-byte header is not safetensors")
        return json.loads(handle.read(length))


def problem(adapter: pathlib.Path, base: pathlib.Path) -> str | None:
    """Why the adapter in folder `adapter` cannot be the base model in folder `base`'s, or None."""
    base_config = base / "config.json"
    weights = adapter / WEIGHTS
    if not base_config.is_file() or not weights.is_file():
        return None  # nothing to compare (a .bin adapter, a base without config.json): vLLM decides
    config = json.loads(base_config.read_text())
    try:
        shapes = widths(config)
    except (KeyError, ValueError, TypeError):
        return None  # not a Llama-style config: no widths to compare
    layers = int(config.get("num_hidden_layers") or 0)
    try:
        header = read_header(weights)
    except (ValueError, struct.error) as exc:
        return f"{WEIGHTS} is not a safetensors file: {exc}"
    for name, meta in sorted(header.items()):
        match = _TENSOR.search(name)
        if not match or not isinstance(meta, dict) or match.group(2) not in shapes:
            continue
        layer, module, side = int(match.group(1)), match.group(2), match.group(3)
        if layers and layer >= layers:
            return f"{name}: layer {layer}, but the base model has {layers} layers"
        shape = meta.get("shape") or []
        fan_in, fan_out = shapes[module]
        width = shape[1] if side == "A" and len(shape) == 2 else shape[0] if len(shape) == 2 else None
        wanted = fan_in if side == "A" else fan_out
        if width != wanted:
            return (f"{name} is {shape}: {module} of the base model takes {fan_in} and gives {fan_out}, so lora_{side} "
                    f"must have {wanted} there (an adapter made for another base model)")
    return None


def rank(adapter: pathlib.Path) -> int | None:
    """`r` of the adapter's adapter_config.json (None: absent or not a positive integer)."""
    try:
        value = json.loads((adapter / CONFIG).read_text()).get("r")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
