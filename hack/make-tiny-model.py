"""Writes a tiny random Llama that the real vLLM CPU engine can serve: config, safetensors weights
and a byte-level BPE tokenizer with a chat template. Runs with the vLLM venv's Python
(hack/install-vllm.sh); nothing is downloaded.

Shape: 4 layers, hidden 256, 4 attention heads, 2 KV heads (head_dim 64: vLLM's CPU attention
kernel rejects head_dim 16), so TP=2 and PP=2 both divide it. The tokenizer is trained on text that
ships with Python itself (a few stdlib sources, read in a fixed order) so it is deterministic and
needs no network. The weights are random (seed 0): answers are gibberish, shapes and timings are real.

Usage: python make-tiny-model.py OUT_DIR
"""

import inspect
import json
import pathlib
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
VOCAB_SIZE = 384
# Long enough for any maxModelLen a test renders; KV cache on CPU is sized by VLLM_CPU_KVCACHE_SPACE.
MAX_POSITIONS = 131072
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def corpus() -> list[str]:
    import argparse, textwrap  # noqa: E401  (stdlib text, read in a fixed order)
    return [inspect.getsource(m) for m in (argparse, json, textwrap)]


def build_tokenizer(out: pathlib.Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[1], pad_token=SPECIALS[2])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "shardwise-tiny-model.json").write_text(json.dumps(
        {"generator": "hack/make-tiny-model.py", "vocab": len(tok), "layers": 4, "hidden": 256,
         "heads": 4, "kvHeads": 2, "seed": 0}, indent=1))
    print(f"wrote {out}: vocab {len(tok)}, {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
