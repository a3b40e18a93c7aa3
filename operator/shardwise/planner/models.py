"""Model architecture facts: the built-in catalog (models.yaml) and per-deployment overrides.

The planner needs only a handful of numbers per model (layer count, hidden size, attention and KV
heads, head dimension, total and active parameters). Users name models by Hugging Face repo id, and
the same weights appear under many ids (`-Instruct`, `-AWQ`, re-uploads by other orgs), so lookup
strips those decorations before giving up; `spec.model.architecture` covers everything else.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from importlib import resources

import yaml


@dataclass(frozen=True)
class ModelArch:
    """Architecture numbers of one model, as in its config.json."""

    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    parameters: float
    active_parameters: float
    source: str
    context_length: int | None = None  # max_position_embeddings; None when not known
    # Read from a config.json (hfconfig.py); the catalog's entries leave them unset.
    weight_bytes: float | None = None  # a quantized checkpoint's bytes, which vLLM loads as stored
    quantization: str | None = None  # the checkpoint's quant_method: fp8, awq, gptq, mxfp4
    sliding_window: int | None = None  # tokens a sliding-window layer keeps in its KV cache
    sliding_layers: int = 0  # layers with that window; the others keep the whole sequence
    # How the checkpoint stores its weights: a torch dtype ("bfloat16", "float16") or the
    # quantization_config's method ("fp8", "awq", "gptq", "mxfp4", "compressed-tensors"); None
    # when not known (an architecture given only in the spec). vLLM loads it as stored.
    stored_format: str | None = None
    # Mixture of experts: routed experts per MoE layer, how many a token uses, and the routed
    # experts' parameters over all layers (None: derived from total and active, see below).
    # EP and DP layouts are searched only when `experts` is known (layouts.py).
    experts: int = 0
    experts_per_token: int = 0
    expert_parameters: float | None = None
    # MLA (DeepSeek-V2/V3/R1, Kimi K2): one latent per token and layer, which TP cannot split, so
    # every TP rank holds the whole of it (the kvHeads 1 encoding already sizes it that way).
    latent_kv: bool = False

    @property
    def is_moe(self) -> bool:
        return self.active_parameters < self.parameters

    @property
    def routed_expert_parameters(self) -> float:
        """Parameters of the routed experts, the part EP splits; the rest (attention, shared
        experts, embeddings) is replicated on every DP rank. Without a count from config.json:
        total = rest + E x e and active = rest + k x e, so E x e = (total - active) x E / (E - k)."""
        if not self.is_moe:
            return 0.0
        if self.expert_parameters is not None:
            return min(self.expert_parameters, self.parameters)
        inactive = self.parameters - self.active_parameters
        if self.experts > self.experts_per_token > 0:
            return min(self.parameters, inactive * self.experts / (self.experts - self.experts_per_token))
        return inactive

    def kv_elements_per_token(self) -> int:
        """K and V elements cached per token across all layers: 2 x layers x kvHeads x headDim."""
        return 2 * self.layers * self.kv_heads * self.head_dim

    def kv_elements_per_sequence(self, tokens: int) -> int:
        """K and V elements one sequence of `tokens` caches: sliding-window layers keep only their
        window (vLLM's hybrid KV cache manager allocates them no more), the others every token."""
        per_layer_token = 2 * self.kv_heads * self.head_dim
        windowed = min(tokens, self.sliding_window) if self.sliding_window else tokens
        full_layers = self.layers - self.sliding_layers
        return per_layer_token * (full_layers * tokens + self.sliding_layers * windowed)


# Decorations that do not change the architecture: chat/instruct tunes, quantized re-uploads,
# release tags. Stripped repeatedly from the end of the repo name.
_DECORATION = re.compile(
    r"[-_](instruct|chat|it|hf|base|awq|gptq|fp8|int4|int8|w4a16|w8a8|w8a16|dynamic|bnb|4bit|8bit"
    r"|v\d+(\.\d+)*|\d{4})$"
)


def _model_key(name: str) -> str:
    tail = name.strip().lower().rsplit("/", 1)[-1]
    tail = tail.removeprefix("meta-")
    previous = None
    while previous != tail:
        previous = tail
        tail = _DECORATION.sub("", tail)
    return tail


@functools.cache
def _catalog() -> tuple[dict[str, ModelArch], dict[str, ModelArch]]:
    """Two indexes: exact lowercase repo id, and decoration-free key."""
    text = resources.files(__package__).joinpath("models.yaml").read_text(encoding="utf-8")
    raw: dict[str, dict[str, object]] = yaml.safe_load(text)
    by_repo: dict[str, ModelArch] = {}
    by_key: dict[str, ModelArch] = {}
    for model_id in sorted(raw):
        entry = raw[model_id]
        parameters = float(entry["parameters"])  # type: ignore[arg-type]
        arch = ModelArch(
            name=model_id,
            layers=int(entry["layers"]),  # type: ignore[call-overload]
            hidden_size=int(entry["hiddenSize"]),  # type: ignore[call-overload]
            attention_heads=int(entry["attentionHeads"]),  # type: ignore[call-overload]
            kv_heads=int(entry["kvHeads"]),  # type: ignore[call-overload]
            head_dim=int(entry["headDim"]),  # type: ignore[call-overload]
            parameters=parameters,
            active_parameters=float(
                entry.get("activeParameters", parameters)  # type: ignore[arg-type]
            ),
            source=str(entry["source"]),
            context_length=int(entry["contextLength"]) if "contextLength" in entry else None,  # type: ignore[call-overload]
            stored_format=str(entry.get("storedFormat", "bfloat16")),
            experts=int(entry.get("experts", 0)),  # type: ignore[call-overload]
            experts_per_token=int(entry.get("expertsPerToken", 0)),  # type: ignore[call-overload]
            latent_kv=bool(entry.get("latentKV", False)),
        )
        by_key.setdefault(_model_key(model_id), arch)
        for repo in entry["names"]:  # type: ignore[attr-defined]
            by_repo[str(repo).lower()] = arch
            by_repo.setdefault(str(repo).lower().rsplit("/", 1)[-1], arch)
            by_key.setdefault(_model_key(str(repo)), arch)
    return by_repo, by_key


# A quantized re-upload names its format (Qwen2.5-72B-Instruct-AWQ, Qwen3-32B-FP8,
# Qwen2.5-7B-Instruct-GPTQ-Int4): the catalog's shapes hold, its stored format does not.
_NAMED_FORMAT = (("awq", "awq"), ("gptq", "gptq"), ("fp8", "fp8"))


def _format_in_name(name: str) -> str | None:
    words = set(re.split(r"[-_.]", name.strip().lower().rsplit("/", 1)[-1]))
    return next((fmt for word, fmt in _NAMED_FORMAT if word in words), None)


def lookup_model(name: str) -> ModelArch | None:
    """The catalog entry for a Hugging Face repo id, or None when the model is unknown. An entry
    found by its decorations alone takes the stored format its name says (-AWQ, -GPTQ, -FP8)."""
    by_repo, by_key = _catalog()
    lowered = name.strip().lower()
    exact = by_repo.get(lowered) or by_repo.get(lowered.rsplit("/", 1)[-1])
    if exact is not None:
        return exact
    found = by_key.get(_model_key(name))
    named = _format_in_name(name)
    if found is not None and named is not None and named != found.stored_format:
        return dataclasses.replace(found, stored_format=named)
    return found
