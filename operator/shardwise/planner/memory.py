"""Per-GPU memory model: does a TP x PP layout fit, and with how much room.

vLLM reserves `gpuMemoryUtilization` x GPU memory per GPU and must fit, on every GPU:

    weights      = parameters x bytes/weight x (layers of the stage / layers) / TP
    KV cache     = maxConcurrency x maxModelLen x KV bytes/token x (stage share) / min(TP, kvHeads)
    overhead     = 1.5 GiB + activations (2048 tokens x hiddenSize x 32 bytes / TP)

- KV bytes/token = 2 x layers x kvHeads x headDim x 2 bytes (vLLM's `--kv-cache-dtype auto` keeps
  the cache in the activation dtype, 16-bit, even for fp8 or int4 weights). With TP > kvHeads vLLM
  replicates KV heads, so each GPU holds 1/kvHeads of the cache rather than 1/TP.
- Sliding-window layers (gpt-oss, Gemma 3; read from config.json) keep only their window of each
  sequence, so KV per sequence is not simply linear in maxModelLen for those models.
- The slowest pipeline stage holds ceil(layers / PP) layers; that stage sets the fit.
- Overhead: ~0.5 GiB CUDA context, ~0.5 GiB NCCL buffers and cuBLAS workspace, ~0.5 GiB CUDA graphs;
  activations for vLLM's default 2048-token scheduling chunk, with ~16 live 16-bit tensors of
  hiddenSize per token at peak (attention and MLP intermediates), split by TP. Kaito's estimator
  reserves 2.3 GiB in total for the same things (GPU-FACTS.md); ours is close for 8B-70B models.

Mixtures of experts under DP attention and EP (layouts.py): the routed experts are split over
the TP x DP ranks (by EP, or by the DP x TP tensor-parallel group without it), attention, shared
experts and embeddings over TP only, so every DP rank holds a full copy of them; each DP engine
has its own KV cache and runs `--max-num-seqs` = ceil(maxConcurrency / DP) sequences:

    weights      = (routed experts / (TP x DP) + the rest / TP) x bytes/weight x stage share
    KV cache     = ceil(maxConcurrency / DP) x maxModelLen x KV bytes/token / min(TP, kvHeads)

MLA's latent (kvHeads 1) is not split by TP: TP8 holds it 8 times, DP8 once per sequence.

With LoRA on, vLLM also holds GPU buffers for `max_loras` adapters of `max_lora_rank` on every
layer's attention and MLP projections, allocated at start whatever adapters are loaded:

    LoRA         = maxLoras x rank x 2 bytes x (stage's layers) x per-layer (in + out) widths

- per layer: qkv (A 3 x hidden, B (q + 2 kv)/TP), o (A q/TP, B hidden), gate_up (A 2 x hidden,
  B 2 x ffn/TP), down (A ffn/TP, B hidden): vLLM shards the B of column-parallel layers and the A
  of row-parallel ones, and keeps the other whole on every GPU (fully_sharded_loras off). The MLP
  width is not in the catalog: it is what the layer's parameters leave after attention, / 3 hidden.

Worked example, Llama-3.1-70B bf16, TP4, 16 x 8192 tokens, H100 80GB (81,559 MiB) at 0.9:
weights 70.6e9 x 2 / 4 = 32.9 GiB; KV 16 x 8192 x 327,680 B / 4 = 10.0 GiB; overhead
1.5 + 2048 x 8192 x 32 / 4 B = 1.63 GiB; total 44.5 GiB of 71.7 GiB usable: fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardwise.planner import models

GIB = 1024**3
MIB = 1024**2
KV_BYTES_PER_ELEMENT = 2
FIXED_OVERHEAD_GIB = 1.5
ACTIVATION_TOKENS = 2048
ACTIVATION_BYTES_PER_HIDDEN_UNIT = 32


@dataclass(frozen=True)
class MemoryFit:
    """GiB per GPU on the fullest GPU of a layout."""

    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    usable_gib: float
    kv_gib_per_sequence: float  # one maxModelLen sequence, per GPU
    lora_gib: float = 0.0  # LoRA adapter slots (spec.lora), 0 without
    dp: int = 1  # DP engines of the replica, each with this GPU's KV room
    model_weights_gib: float = 0.0  # the whole model once (per GPU x GPUs overcounts under DP)


    @property
    def needed_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.overhead_gib + self.lora_gib

    @property
    def fixed_gib(self) -> float:
        """What the KV cache cannot use: weights, overhead and LoRA slots."""
        return self.weights_gib + self.overhead_gib + self.lora_gib

    @property
    def fits(self) -> bool:
        return self.needed_gib <= self.usable_gib

    def kv_room_tokens(self, max_model_len: int) -> float:
        """Tokens of KV cache the room left after weights and overhead holds (per replica)."""
        room = self.usable_gib - self.fixed_gib
        if room <= 0 or self.kv_gib_per_sequence <= 0:
            return 0.0
        return room / self.kv_gib_per_sequence * max_model_len * self.dp

    @property
    def sequences_that_fit(self) -> int:
        """How many maxModelLen sequences the KV room left after weights and overhead holds."""
        room = self.usable_gib - self.fixed_gib
        if room <= 0 or self.kv_gib_per_sequence <= 0:
            return 0
        return int(room / self.kv_gib_per_sequence) * self.dp


def stage_share(layers: int, pp: int) -> float:
    """Fraction of the layers on the largest pipeline stage."""
    return math.ceil(layers / pp) / layers


def kv_bytes_per_token(arch: models.ModelArch) -> int:
    return arch.kv_elements_per_token() * KV_BYTES_PER_ELEMENT


def memory_per_gpu(
    arch: models.ModelArch,
    *,
    bytes_per_weight: float,
    max_model_len: int,
    max_concurrency: int,
    gpu_memory_utilization: float,
    gpu_memory_mib: int,
    tp: int,
    pp: int,
    lora_slots: int = 0,
    lora_rank: int = 0,
    dp: int = 1,
    engine: str = "vllm",
) -> MemoryFit:
    share = stage_share(arch.layers, pp)
    experts = arch.routed_expert_parameters
    weights = ((arch.parameters - experts) / tp + experts / (tp * dp)) * bytes_per_weight * share
    per_sequence = (
        arch.kv_elements_per_sequence(max_model_len) * KV_BYTES_PER_ELEMENT * share
        / min(tp, arch.kv_heads)
    )
    activations = ACTIVATION_TOKENS * arch.hidden_size * ACTIVATION_BYTES_PER_HIDDEN_UNIT / tp
    return MemoryFit(
        weights_gib=weights / GIB,
        kv_cache_gib=per_sequence * rank_sequences(max_concurrency, dp) / GIB,
        overhead_gib=FIXED_OVERHEAD_GIB + activations / GIB,
        # Each engine reads gpuMemoryUtilization its own way (usable_gib).
        usable_gib=usable_gib(
            engine, gpu_memory_utilization, gpu_memory_mib * MIB / GIB, weights / GIB,
            FIXED_OVERHEAD_GIB + activations / GIB),
        kv_gib_per_sequence=per_sequence / GIB,
        lora_gib=lora_bytes_per_gpu(arch, lora_slots, lora_rank, tp=tp, pp=pp) / GIB,
        dp=dp,
        model_weights_gib=arch.parameters * bytes_per_weight / GIB,
    )


def usable_gib(engine: str, utilization: float, gpu_gib: float, weights_gib: float,
               overhead_gib: float) -> float:
    """GiB per GPU the engine lets weights, overhead and KV cache take together
    (planner/engines.py says how each engine reads its memory flag)."""
    if engine == "sglang":
        # The static pool holds weights and KV; activations and graphs fit in the rest when they
        # can, and only their excess comes out of the pool.
        return utilization * gpu_gib + min(overhead_gib, (1 - utilization) * gpu_gib)
    if engine == "trtllm":
        free = gpu_gib - weights_gib - overhead_gib
        if free <= 0:
            return gpu_gib  # the weights alone do not fit: needed > usable says so
        return weights_gib + overhead_gib + utilization * free
    return utilization * gpu_gib


def rank_sequences(max_concurrency: int, dp: int) -> int:
    """`--max-num-seqs` of each DP engine: vLLM applies it per rank (SERVING-SHAPES.md A)."""
    return -(-max_concurrency // max(dp, 1))


def mlp_width(arch: models.ModelArch) -> float:
    """The MLP's intermediate size, from what a layer's parameters leave after attention
    (embeddings are counted in, so it reads a little wide: Llama-3.1-8B 17,000 for 14,336)."""
    q = arch.attention_heads * arch.head_dim
    attention = arch.hidden_size * (q + 2 * arch.kv_heads * arch.head_dim) + q * arch.hidden_size
    per_layer = arch.active_parameters / arch.layers
    return max(float(arch.hidden_size), (per_layer - attention) / (3 * arch.hidden_size))


def lora_bytes_per_gpu(arch: models.ModelArch, slots: int, rank: int, *, tp: int, pp: int) -> float:
    """GPU bytes of `slots` LoRA adapters of `rank` on the fullest GPU (the formula above)."""
    if slots <= 0 or rank <= 0:
        return 0.0
    h, q, kv, ffn = arch.hidden_size, arch.attention_heads * arch.head_dim, arch.kv_heads * arch.head_dim, mlp_width(arch)
    per_layer = (3 * h + (q + 2 * kv) / tp) + (q / tp + h) + (2 * h + 2 * ffn / tp) + (ffn / tp + h)
    layers = math.ceil(arch.layers / pp)
    return slots * rank * KV_BYTES_PER_ELEMENT * layers * per_layer
