"""Write a tiny model repository folder for the local hub: a config and safetensors shards.

The shards are valid safetensors files (8-byte header length, JSON header, raw float32 data) of
random values, sized as asked; enough for a cache to download, verify and size, not for vLLM to
generate sensible text.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
    "max_position_embeddings": 2048, "torch_dtype": "float32",
}


def _safetensors(path: pathlib.Path, name: str, floats: int) -> None:
    header = json.dumps({name: {"dtype": "F32", "shape": [floats], "data_offsets": [0, floats * 4]}}).encode()
    header += b" " * (-len(header) % 8)
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.write(os.urandom(floats * 4))


def write_tiny_model(folder: pathlib.Path, *, shards: int = 2, shard_bytes: int = 2 << 20,
                     gated_token: str | None = None) -> pathlib.Path:
    """A repository folder `folder` with config.json and `shards` safetensors files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    for index in range(shards):
        _safetensors(folder / f"model-{index + 1:05d}-of-{shards:05d}.safetensors", f"w{index}", shard_bytes // 4)
    if gated_token:
        (folder / ".hub.json").write_text(json.dumps({"gated": True, "token": gated_token}))
    return folder
