"""Writes a tiny random mixture of experts (Qwen3-MoE, the architecture of Qwen3-30B-A3B and
Qwen3-235B-A22B) that the real vLLM CPU engine can serve with expert parallelism. Runs with the
vLLM venv's Python (hack/install-vllm.sh); nothing is downloaded; seconds on one core.

Shape: 2 layers, hidden 256, 4 attention heads, 2 KV heads, head_dim 64 (vLLM's CPU attention
kernel rejects head_dim 16), 8 routed experts of intermediate 128, 2 per token, every layer
sparse. 8 experts split over EP 2, 4 or 8; the CPU MoE kernel wants hidden and intermediate sizes
divisible by its alignment (32 to 128 depending on the ISA), which 256 and 128 are (64 per rank at
TP2). The tokenizer and chat template are the tiny Llama's (hack/make-tiny-model.py), so both
models answer the same client. Weights random (seed 0): answers are gibberish, the MoE path is real.

Usage: python make-tiny-moe.py OUT_DIR
"""

import importlib.util
import json
import pathlib
import sys

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

EXPERTS, EXPERTS_PER_TOKEN, LAYERS = 8, 2, 2


def tiny_model_module():
    spec = importlib.util.spec_from_file_location(
        "make_tiny_model", pathlib.Path(__file__).with_name("make-tiny-model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    base = tiny_model_module()
    tok = base.build_tokenizer(out)
    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=len(tok), hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_experts=EXPERTS, num_experts_per_tok=EXPERTS_PER_TOKEN, decoder_sparse_step=1,
        mlp_only_layers=[], norm_topk_prob=True, max_position_embeddings=base.MAX_POSITIONS,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False, torch_dtype="float32")
    model = Qwen3MoeForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "shardwise-tiny-model.json").write_text(json.dumps(
        {"generator": "hack/make-tiny-moe.py", "architecture": "Qwen3MoeForCausalLM", "vocab": len(tok),
         "layers": LAYERS, "hidden": 256, "heads": 4, "kvHeads": 2, "experts": EXPERTS,
         "expertsPerToken": EXPERTS_PER_TOKEN, "moeIntermediate": 128, "seed": 0}, indent=1))
    print(f"wrote {out}: vocab {len(tok)}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"{EXPERTS} experts x {LAYERS} layers")


if __name__ == "__main__":
    main()
