"""A model's architecture from its own Hugging Face `config.json`, for models the catalog lacks.

Pure: the caller reads the files (shardwise.hub does, from the hub or a folder) and passes plain
dicts. Numbers and where each came from, in order of trust:

- shapes (layers, hidden size, heads, KV heads, head_dim, experts) from config.json, or from its
  `text_config` for multimodal wrappers (Gemma 3, Llama 4, Mistral 3): the language model is what
  the KV cache and the per-token weight reads scale with;
- weight bytes from `model.safetensors.index.json`'s `metadata.total_size` (the bytes on disk,
  which vLLM loads as they are), else from the hub's safetensors metadata (parameters per dtype),
  else computed from the shapes and the quantization config;
- the parameter count from those bytes over the stored dtype's width for unquantized checkpoints,
  else from the shapes: embeddings, attention, dense MLP or experts (and shared experts), norms and
  an untied lm_head. Biases, q/k norms and attention sinks are left out (under 0.1 % of any model
  checked).

Checked against the hub's published counts for the fixtures in tests/fixtures/hub-configs: the
shape count is within 2 % of every one (the gap on Magistral is its vision tower, which vLLM also
loads: the memory figure from the hub's metadata includes it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from shardwise.planner import models

INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"

# Bytes per stored element by safetensors dtype (the hub's metadata keys).
_DTYPE_BYTES = {
    "F64": 8.0, "F32": 4.0, "BF16": 2.0, "F16": 2.0, "F8_E4M3": 1.0, "F8_E5M2": 1.0,
    "I64": 8.0, "I32": 4.0, "I16": 2.0, "I8": 1.0, "U8": 1.0, "BOOL": 1.0,
}
_TORCH_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "float8_e4m3fn": 1.0}
# MXFP4 (gpt-oss): 4-bit values in blocks of 32 sharing one 8-bit scale, 0.5 + 1/32 bytes a value.
_MXFP4_BYTES = 0.5 + 1 / 32
# The hub counts an MXFP4 checkpoint's U8 "parameters" as unpacked values plus scale bytes
# (values x 33/32): gpt-oss-20b's 24 layers x 32 experts x 24,883,200 = 19,110,297,600 values and
# 597,196,800 scales sum to exactly its U8 figure, 19,707,494,400. Bytes are then U8 x 17/33.
_MXFP4_U8_BYTES = 17 / 33
# AWQ/GPTQ int4 with group size 128: 0.5 bytes a weight plus a 16-bit scale and a 4-bit zero per
# group.
_INT4_GROUP_OVERHEAD = (2 + 0.5) / 128


class ConfigError(ValueError):
    """config.json lacks a number the planner needs, or holds one it cannot use."""


class RepoFiles(Protocol):
    """Where a model's files are read from: the hub at a revision, or a local folder."""

    where: str  # in words, for the source string: "hub https://huggingface.co Qwen/Qwen3-32B@main"

    def read_json(self, filename: str) -> Mapping[str, Any] | None:
        """The file parsed, or None when the repository has no such file."""

    def safetensors_parameters(self) -> Mapping[str, int] | None:
        """The hub's safetensors metadata: parameters per dtype ({"BF16": 32762123264}); None when
        unknown (a folder, or a repo without safetensors)."""


@dataclasses.dataclass(frozen=True)
class _Shapes:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tied: bool
    experts: int  # 0 for a dense model
    experts_per_token: int
    expert_width: int
    shared_width: int  # intermediate size of the always-on shared expert(s); 0 without
    moe_layers: int
    qkv_bias: bool
    # Multi-head latent attention (DeepSeek V2/V3, Kimi K2): ranks and head widths; 0 without.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0


def _number(config: Mapping[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value > 0:
            return value
        if isinstance(value, float) and value.is_integer() and value > 0:
            return int(value)
    return default


def _required(config: Mapping[str, Any], *keys: str) -> int:
    value = _number(config, *keys)
    if value is None:
        raise ConfigError(f"config.json has no {' or '.join(keys)}")
    return value


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: `text_config` over the top level (multimodal wrappers keep
    quantization_config and sometimes tie_word_embeddings at the top)."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping):
        return {**config, **inner}
    return dict(config)


def _moe_layer_count(text: Mapping[str, Any], layers: int) -> int:
    """Layers whose MLP is experts: all, except DeepSeek's first_k_dense_replace, Qwen's
    mlp_only_layers / decoder_sparse_step, and Llama 4's interleave_moe_layer_step."""
    dense_first = _number(text, "first_k_dense_replace", default=0) or 0
    step = _number(text, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1
    only_mlp = text.get("mlp_only_layers") or []
    count = 0
    for index in range(layers):
        if index < dense_first or index in only_mlp:
            continue
        if (index + 1) % step == 0:
            count += 1
    return count


def _shapes(config: Mapping[str, Any]) -> _Shapes:
    text = text_config(config)
    layers = _required(text, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _required(text, "hidden_size", "d_model", "n_embd")
    heads = _required(text, "num_attention_heads", "n_head")
    kv_heads = _number(text, "num_key_value_heads", "num_kv_heads", default=heads) or heads
    head_dim = _number(text, "head_dim") or hidden // heads
    kv_lora = _number(text, "kv_lora_rank", default=0) or 0
    rope_dim = _number(text, "qk_rope_head_dim", default=0) or 0
    if kv_lora:
        # MLA caches one latent of kv_lora_rank + qk_rope_head_dim per token and layer, shared by K
        # and V and by every head: as the catalog encodes it, 1 KV head of half that width.
        kv_heads, head_dim = 1, (kv_lora + rope_dim) // 2
    if head_dim < 1:
        raise ConfigError(f"hidden_size {hidden} / num_attention_heads {heads} is below one")
    experts = _number(text, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0
    per_token = _number(text, "num_experts_per_tok", "experts_per_token", "moe_topk", default=0)
    intermediate = _number(text, "intermediate_size", "ffn_dim", default=4 * hidden) or 4 * hidden
    if experts and not per_token:
        raise ConfigError("config.json names experts but no num_experts_per_tok")
    expert_width = _number(text, "moe_intermediate_size", default=intermediate) or intermediate
    shared = _number(text, "shared_expert_intermediate_size", default=0) or 0
    if not shared and _number(text, "n_shared_experts"):
        shared = expert_width * (_number(text, "n_shared_experts") or 0)
    if not shared and text.get("model_type") == "llama4_text" and experts:
        shared = expert_width  # Llama 4's one shared expert has the routed experts' width
    # Llama 4's dense layers have their own width; elsewhere the dense MLP is intermediate_size.
    dense_width = _number(text, "intermediate_size_mlp", default=intermediate) or intermediate
    tied = text.get("tie_word_embeddings")
    if tied is None:
        tied = config.get("tie_word_embeddings")
    if tied is None:  # transformers' defaults: Gemma ties, the Llama/Qwen/Mistral families do not
        tied = str(text.get("model_type", "")).startswith("gemma")
    return _Shapes(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=_required(text, "vocab_size"),
        intermediate=dense_width,
        tied=bool(tied),
        experts=experts,
        experts_per_token=per_token or 0,
        expert_width=expert_width,
        shared_width=shared,
        moe_layers=_moe_layer_count(text, layers) if experts else 0,
        # Qwen2 has q/k/v biases without saying so; others say attention_bias.
        qkv_bias=bool(text.get("attention_bias")) or text.get("model_type") == "qwen2",
        q_lora_rank=_number(text, "q_lora_rank", default=0) or 0,
        kv_lora_rank=kv_lora,
        qk_rope_dim=rope_dim,
        qk_nope_dim=_number(text, "qk_nope_head_dim", default=0) or 0,
        v_head_dim=_number(text, "v_head_dim", default=0) or 0,
    )


@dataclasses.dataclass(frozen=True)
class ParameterCount:
    """Parameters by where they sit; `expert` is the routed experts of all MoE layers."""

    embedding: float
    attention: float
    dense_mlp: float
    expert: float
    other: float  # routers, shared experts, norms, untied lm_head
    active_expert: float
    shared_expert: float = 0.0  # the always-on shared experts: part of `other`, quantized like experts

    @property
    def total(self) -> float:
        return self.embedding + self.attention + self.dense_mlp + self.expert + self.other

    @property
    def active(self) -> float:
        return self.total - self.expert + self.active_expert


def _mla_attention(s: _Shapes) -> int:
    """One MLA layer's projections: q (through q_lora_rank when set), the joint KV down-projection
    with its rope part, the KV up-projection to every head's nope key and value, and the output."""
    q_width = s.heads * (s.qk_nope_dim + s.qk_rope_dim)
    query = s.hidden * s.q_lora_rank + s.q_lora_rank * q_width if s.q_lora_rank else s.hidden * q_width
    kv_down = s.hidden * (s.kv_lora_rank + s.qk_rope_dim)
    kv_up = s.kv_lora_rank * s.heads * (s.qk_nope_dim + s.v_head_dim)
    return query + kv_down + kv_up + s.heads * s.v_head_dim * s.hidden


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """Parameters from config.json's shapes alone (gated MLPs: gate, up and down projections)."""
    s = _shapes(config)
    attention = s.hidden * s.head_dim * (2 * s.heads + 2 * s.kv_heads)
    if s.kv_lora_rank:
        attention = _mla_attention(s)
    elif s.qkv_bias:
        attention += (s.heads + 2 * s.kv_heads) * s.head_dim
    dense_layers = s.layers - s.moe_layers
    one_expert = 3 * s.hidden * s.expert_width
    per_moe_layer_other = s.hidden * s.experts + 3 * s.hidden * s.shared_width  # router + shared
    norms = (2 * s.layers + 1) * s.hidden
    head = 0 if s.tied else s.vocab * s.hidden
    return ParameterCount(
        embedding=float(s.vocab * s.hidden),
        attention=float(s.layers * attention),
        dense_mlp=float(dense_layers * 3 * s.hidden * s.intermediate),
        expert=float(s.moe_layers * s.experts * one_expert),
        other=float(s.moe_layers * per_moe_layer_other + norms + head),
        active_expert=float(s.moe_layers * s.experts_per_token * one_expert),
        shared_expert=float(s.moe_layers * 3 * s.hidden * s.shared_width),
    )


def _quantization(config: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any]]:
    raw = config.get("quantization_config") or text_config(config).get("quantization_config")
    if not isinstance(raw, Mapping):
        return None, {}
    method = str(raw.get("quant_method") or "").lower() or None
    return method, raw


def _compressed_bits(raw: Mapping[str, Any]) -> float:
    """Weight bits of a compressed-tensors checkpoint (llm-compressor's FP8, W8A8, W4A16): the
    first config group's weights.num_bits."""
    groups = raw.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("num_bits"):
                return float(weights["num_bits"])
    raise ConfigError("quantization_config (compressed-tensors) names no weights.num_bits")


def stored_format(config: Mapping[str, Any]) -> str:
    """How the checkpoint stores its weights: the quantization_config's method, else torch_dtype
    (fp32 checkpoints included: vLLM's --dtype auto loads them as 16-bit)."""
    method, _ = _quantization(config)
    if method:
        return method
    text = text_config(config)
    return str(text.get("torch_dtype") or text.get("dtype") or "bfloat16").lower()


def _computed_weight_bytes(count: ParameterCount, method: str, raw: Mapping[str, Any]) -> float:
    """Bytes of a quantized checkpoint from its shapes: what the method quantizes at its width,
    the rest (embeddings, lm_head, norms, routers, and whatever modules_to_not_convert keeps) at 16
    bits. Shared experts are linear layers like the routed ones, quantized with them."""
    linear = count.attention + count.dense_mlp + count.expert + count.shared_expert
    rest = count.total - linear
    if method == "mxfp4":
        # gpt-oss: experts in MXFP4; attention, router, embeddings and lm_head stay bf16.
        return count.expert * _MXFP4_BYTES + (count.total - count.expert) * 2
    if method in ("awq", "gptq"):
        bits = float(raw.get("bits") or raw.get("w_bit") or 4)
        return linear * (bits / 8 + _INT4_GROUP_OVERHEAD) + rest * 2
    if method in ("fp8", "fbgemm_fp8"):
        return linear * 1 + rest * 2
    if method == "compressed-tensors":
        bits = _compressed_bits(raw)
        overhead = _INT4_GROUP_OVERHEAD if bits < 8 else 0.0
        return linear * (bits / 8 + overhead) + rest * 2
    raise ConfigError(f"quantization_config.quant_method {method!r} is not one the planner knows "
                      "(fp8, awq, gptq, mxfp4, compressed-tensors); set "
                      "spec.model.architecture.parameters")


def _metadata_bytes(parameters: Mapping[str, int], method: str | None) -> float:
    total = 0.0
    for dtype, count in parameters.items():
        width = _DTYPE_BYTES.get(str(dtype).upper())
        if width is None:
            raise ConfigError(f"the hub's safetensors metadata has an unknown dtype {dtype!r}")
        if method == "mxfp4" and str(dtype).upper() == "U8":
            width = _MXFP4_U8_BYTES
        total += count * width
    return total


def _count_text(value: float) -> str:
    return f"{value / 1e9:.2f}B"


def arch_from_config(
    name: str,
    config: Mapping[str, Any],
    *,
    total_size: int | None = None,
    safetensors_parameters: Mapping[str, int] | None = None,
    where: str = "config.json",
) -> models.ModelArch:
    """The planner's architecture for `name` from its config.json (and, when known, the index's
    total_size or the hub's safetensors parameters per dtype); `source` says where each came from."""
    s = _shapes(config)
    text = text_config(config)
    count = count_parameters(config)
    method, raw = _quantization(config)
    stored = str(text.get("torch_dtype") or text.get("dtype") or "bfloat16").lower()
    stored_bytes = _TORCH_DTYPE_BYTES.get(stored, 2.0)
    notes = [f"config.json of {where}"]

    weight_bytes: float | None = None
    if total_size:
        weight_bytes, bytes_from = float(total_size), f"{INDEX_FILE} total_size"
    elif safetensors_parameters:
        weight_bytes = _metadata_bytes(safetensors_parameters, method)
        bytes_from = "the hub's safetensors metadata"
    elif method:
        weight_bytes, bytes_from = _computed_weight_bytes(count, method, raw), f"{method} shapes"
    else:
        bytes_from = ""

    if method is None and weight_bytes is not None:
        # Unquantized: bytes over the stored width is the count (fp32 checkpoints load as 16-bit,
        # so the spec's dtype, not the file, sets their memory).
        parameters = weight_bytes / stored_bytes
        notes.append(f"{_count_text(parameters)} parameters from {bytes_from}")
        weight_bytes = None
    else:
        parameters = count.total
        notes.append(f"{_count_text(parameters)} parameters from the config's shapes")
        if weight_bytes is not None:
            notes.append(f"{method} weights {weight_bytes / 1e9:.1f} GB from {bytes_from}")
    # Experts' share of the count scales to the measured total, so active parameters stay right
    # when the shape count misses a few percent.
    active = parameters * count.active / count.total
    if s.experts:
        notes.append(
            f"MoE {s.experts} experts, {s.experts_per_token} per token: "
            f"{_count_text(active)} active"
        )

    window, sliding = _sliding(text, s.layers)
    if sliding:
        notes.append(f"{sliding} of {s.layers} layers keep a {window}-token sliding window")
    return models.ModelArch(
        name=name,
        layers=s.layers,
        hidden_size=s.hidden,
        attention_heads=s.heads,
        kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        parameters=parameters,
        active_parameters=min(active, parameters),
        source="; ".join(notes),
        context_length=_number(text, "max_position_embeddings"),
        weight_bytes=weight_bytes,
        quantization=method,
        sliding_window=window if sliding else None,
        sliding_layers=sliding,
        stored_format=stored_format(config),
        experts=s.experts,
        experts_per_token=s.experts_per_token,
        expert_parameters=parameters * count.expert / count.total if s.experts else None,
        latent_kv=bool(s.kv_lora_rank),
    )


def _sliding(text: Mapping[str, Any], layers: int) -> tuple[int | None, int]:
    """(window, layers that use it): from layer_types (gpt-oss, Gemma 3 in newer transformers),
    Gemma's sliding_window_pattern (every Nth layer global), or every layer when a window is set and
    not switched off (Qwen2/3 configs carry a window with use_sliding_window false: unused)."""
    window = _number(text, "sliding_window")
    if window is None or text.get("use_sliding_window") is False:
        return None, 0
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        return window, sum(1 for kind in kinds if kind == "sliding_attention")
    pattern = _number(text, "sliding_window_pattern")
    if pattern:
        return window, layers - layers // pattern
    return window, layers


def _fully_given(model_spec: Mapping[str, Any]) -> bool:
    given = model_spec.get("architecture") or {}
    required = ("parameters", "layers", "hiddenSize", "attentionHeads")
    return isinstance(given, Mapping) and all(given.get(key) is not None for key in required)


def needs_config(model_spec: Mapping[str, Any]) -> bool:
    """True when neither the catalog nor spec.model.architecture gives the planner its numbers."""
    name = str(model_spec.get("name") or "").strip()
    given = model_spec.get("architecture") or {}
    if not name or models.lookup_model(name) is not None:
        return False
    required = ("parameters", "layers", "hiddenSize", "attentionHeads")
    return not (isinstance(given, Mapping) and all(given.get(key) is not None for key in required))


def resolve_architecture(
    model_spec: Mapping[str, Any], files: RepoFiles, *, catalogued_too: bool = False
) -> models.ModelArch | None:
    """The architecture to plan `spec.model` with when the catalog lacks it and the spec does not
    give it, read through `files`; None when no reading is needed (catalog or spec suffice).
    `catalogued_too`: read it for a catalog model as well (a config handed over by the user is
    the checkpoint's own word on its stored format).

    Raises ConfigError when config.json is missing or unusable; whatever `files` raises (the hub's
    refusal, shardwise.hub.HubError) passes through."""
    catalogued = bool(str(model_spec.get("name") or "").strip()) and not needs_config(model_spec)
    if not needs_config(model_spec) and not (catalogued_too and catalogued
                                             and not _fully_given(model_spec)):
        return None
    config = files.read_json(CONFIG_FILE)
    if config is None:
        raise ConfigError(f"{files.where} has no {CONFIG_FILE}")
    index = files.read_json(INDEX_FILE)
    metadata = index.get("metadata") if isinstance(index, Mapping) else None
    total_size = _number(metadata, "total_size") if isinstance(metadata, Mapping) else None
    parameters = None if total_size else files.safetensors_parameters()
    return arch_from_config(
        str(model_spec["name"]).strip(),
        config,
        total_size=total_size,
        safetensors_parameters=parameters,
        where=files.where,
    )


def describe(arch: models.ModelArch) -> dict[str, Any]:
    """The architecture as the plan's JSON and the status show it (spec.model.architecture keys)."""
    shown: dict[str, Any] = {
        "layers": arch.layers,
        "hiddenSize": arch.hidden_size,
        "attentionHeads": arch.attention_heads,
        "kvHeads": arch.kv_heads,
        "headDim": arch.head_dim,
        "parameters": arch.parameters,
        "activeParameters": arch.active_parameters,
        "source": arch.source,
    }
    if arch.weight_bytes is not None:
        shown["weightBytes"] = arch.weight_bytes
    if arch.quantization:
        shown["quantization"] = arch.quantization
    if arch.stored_format:
        shown["storedFormat"] = arch.stored_format
    if arch.sliding_window:
        shown["slidingWindow"] = arch.sliding_window
        shown["slidingLayers"] = arch.sliding_layers
    if arch.context_length:
        shown["contextLength"] = arch.context_length
    return shown
