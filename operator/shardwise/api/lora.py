"""The LoRA limits a deployment's engines start with, from spec.lora and spec.adapters.

Fixed at engine start (vLLM sizes its adapter slots then), so these are in the pod template and a
change to them is a rollout. They depend on the adapter list only through the largest known rank:
adding an adapter that fits the limits in use changes no pod; one whose rank needs a larger
--max-lora-rank either raises it (lora.maxLoraRank unset: a rollout, said on the status) or is
refused with RankAboveLimit (lora.maxLoraRank set: the user's limit is kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shardwise.api.v1alpha1 import (DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, LORA_RANKS, AdapterSpec,
                                    InferenceDeploymentSpec, LoraSpec)


@dataclasses.dataclass(frozen=True)
class Limits:
    max_rank: int
    max_loras: int
    max_cpu_loras: int | None  # None: vLLM's default (max_loras)


def smallest_rank_for(rank: int) -> int:
    """The smallest --max-lora-rank vLLM accepts that holds an adapter of `rank`."""
    return next((r for r in LORA_RANKS if r >= rank), LORA_RANKS[-1])


def limits(spec: InferenceDeploymentSpec) -> Limits | None:
    """None: LoRA off (no spec.lora and no adapters)."""
    return limits_of(spec.lora, spec.adapters)


def limits_of(lora: LoraSpec | None, adapters: Sequence[AdapterSpec]) -> Limits | None:
    if lora is None and not adapters:
        return None
    known = [a.rank for a in adapters if a.rank is not None]
    if lora is not None and lora.maxLoraRank is not None:
        max_rank = lora.maxLoraRank
    else:
        max_rank = smallest_rank_for(max([DEFAULT_MAX_LORA_RANK, *known]))
    max_loras = lora.maxLoras if lora is not None else DEFAULT_MAX_LORAS
    return Limits(max_rank=max_rank, max_loras=max_loras,
                  max_cpu_loras=lora.maxCpuLoras if lora is not None else None)


def serve_flags(spec: InferenceDeploymentSpec) -> list[str]:
    """The `vllm serve` flags for LoRA; the adapters themselves are loaded at runtime, never here."""
    found = limits(spec)
    if found is None:
        return []
    flags = ["--enable-lora", "--max-lora-rank", str(found.max_rank), "--max-loras", str(found.max_loras)]
    if found.max_cpu_loras is not None:
        flags += ["--max-cpu-loras", str(found.max_cpu_loras)]
    return flags


# vLLM registers /v1/load_lora_adapter and /v1/unload_lora_adapter only with this set.
RUNTIME_UPDATES_ENV = {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}
