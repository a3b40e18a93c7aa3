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

    @property
    def needed_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.overhead_gib

    @property
    def fits(self) -> bool:
        return self.needed_gib <= self.usable_gib

    def kv_room_tokens(self, max_model_len: int) -> float:
        """Tokens of KV cache the room left after weights and overhead holds (per replica)."""
        room = self.usable_gib - self.weights_gib - self.overhead_gib
        if room <= 0 or self.kv_gib_per_sequence <= 0:
            return 0.0
        return room / self.kv_gib_per_sequence * max_model_len

    @property
    def sequences_that_fit(self) -> int:
        """How many maxModelLen sequences the KV room left after weights and overhead holds."""
        room = self.usable_gib - self.weights_gib - self.overhead_gib
        if room <= 0 or self.kv_gib_per_sequence <= 0:
            return 0
        return int(room / self.kv_gib_per_sequence)


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
) -> MemoryFit:
    share = stage_share(arch.layers, pp)
    weights = arch.parameters * bytes_per_weight * share / tp
    per_sequence = (
        arch.kv_elements_per_sequence(max_model_len) * KV_BYTES_PER_ELEMENT * share
        / min(tp, arch.kv_heads)
    )
    activations = ACTIVATION_TOKENS * arch.hidden_size * ACTIVATION_BYTES_PER_HIDDEN_UNIT / tp
    return MemoryFit(
        weights_gib=weights / GIB,
        kv_cache_gib=per_sequence * max_concurrency / GIB,
        overhead_gib=FIXED_OVERHEAD_GIB + activations / GIB,
        usable_gib=gpu_memory_utilization * gpu_memory_mib * MIB / GIB,
        kv_gib_per_sequence=per_sequence / GIB,
    )
