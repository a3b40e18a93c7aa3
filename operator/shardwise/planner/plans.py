"""The planner's answer as plain data, and its camelCase JSON form (status.plan, `shardwise plan`).

One shape serves the chosen plan and each rejected alternative, so a reader compares like with like;
alternatives add `rejectedBecause` and have no alternatives of their own. Figures are rounded here,
once, so the JSON is stable from one reconcile to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.planner import memory

# Reason codes (CamelCase, as metav1.Condition reasons).
PLANNED = "Planned"
INSUFFICIENT_GPU_MEMORY = "InsufficientGPUMemory"
NO_NVLINK_DOMAIN = "NoNVLinkDomain"
NO_MATCHING_NODES = "NoMatchingNodes"
INVALID_PARALLELISM = "InvalidParallelism"
NOT_ENOUGH_GPUS = "NotEnoughGPUs"


@dataclass(frozen=True)
class Predicted:
    itl_ms: float
    ttft_ms: float
    tokens_per_second: float
    hourly_usd: float
    per_million_output_tokens_usd: float
    price_source: str
    # metric -> (typical, p90) factor of |predicted / measured|, held out (error_bands.yaml)
    error_band: tuple[tuple[str, float, float], ...] = ()
    gpu_family: str = ""
    saturated: bool = False
    correction: Correction | None = None
    idle_itl_ms: float | None = None  # one request at a time: the floor more replicas cannot lower

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "itlMs": round(self.itl_ms, 2),
            "ttftMs": round(self.ttft_ms, 1),
            "tokensPerSecond": round(self.tokens_per_second, 1),
            "hourlyUSD": round(self.hourly_usd, 2),
            "perMillionOutputTokensUSD": round(self.per_million_output_tokens_usd, 3),
            "priceSource": self.price_source,
        }
        if self.idle_itl_ms is not None:
            body["idleItlMs"] = round(self.idle_itl_ms, 2)
        if self.saturated:
            body["saturated"] = True
        if self.error_band:
            body["expectedError"] = {
                "gpuFamily": self.gpu_family,
                **{metric: {"typicalFactor": round(typical, 2), "p90Factor": round(p90, 2)}
                   for metric, typical, p90 in self.error_band},
            }
        if self.correction is not None:
            body["correction"] = self.correction.to_dict()
        return body


@dataclass(frozen=True)
class Correction:
    """Observed/predicted factors learned from the fleet, already applied to the figures."""

    ttft: float
    itl: float
    tokens_per_second: float
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttftFactor": round(self.ttft, 3),
            "itlFactor": round(self.itl, 3),
            "tokensPerSecondFactor": round(self.tokens_per_second, 3),
            "samples": self.samples,
        }


@dataclass(frozen=True)
class Plan:
    feasible: bool
    reason: str
    reason_code: str
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    gpus_per_replica: int | None = None
    nodes_per_replica: int | None = None
    gpus_per_node: int | None = None
    gpu_product: str | None = None
    interconnect: str | None = None
    schedulable_now: bool = False
    capacity_message: str = ""
    predicted: Predicted | None = None
    memory: memory.MemoryFit | None = None
    alternatives: tuple[Plan, ...] = ()
    rejected_because: str | None = None
    # What vLLM loads (request.Weights.to_dict()): the chosen plan's, not each alternative's.
    weights: dict[str, Any] | None = None
    data_parallel: int = 1  # DP attention engines (vLLM --data-parallel-size)
    expert_parallel: int = 1  # EP size (TP x DP) when experts are sharded, else 1
    layout: str | None = None  # TP8xPP1, TP8xEP8, DP2xTP4xEP8 (layouts.Layout.label)
    engine: str = "vllm"  # spec.engine the predictions and memory fit are for

    def _body(self) -> dict[str, Any]:
        fit = self.memory
        return {
            "feasible": self.feasible,
            "engine": self.engine,
            "tensorParallel": self.tensor_parallel,
            "pipelineParallel": self.pipeline_parallel,
            # `kubectl get infd`'s LAYOUT column (TP8xPP1, TP8xEP8, DP2xTP4xEP8): one narrow column.
            "layout": self.layout or (f"TP{self.tensor_parallel}xPP{self.pipeline_parallel}"
                                      if self.tensor_parallel and self.pipeline_parallel else None),
            # vLLM --data-parallel-size, and the EP size (TP x DP) with --enable-expert-parallel
            # (1: experts split by TP like any other layer).
            "dataParallel": self.data_parallel if self.tensor_parallel else None,
            "expertParallel": self.expert_parallel if self.tensor_parallel else None,
            "gpusPerReplica": self.gpus_per_replica,
            "nodesPerReplica": self.nodes_per_replica,
            "gpusPerNode": self.gpus_per_node,
            "gpuProduct": self.gpu_product,
            "interconnect": self.interconnect,
            "reason": self.reason,
            "reasonCode": self.reason_code,
            "schedulableNow": self.schedulable_now,
            "capacityMessage": self.capacity_message,
            "predicted": self.predicted.to_dict() if self.predicted else None,
            "memory": {
                "weightsGiBPerGPU": round(fit.weights_gib, 2),
                # DP ranks each hold attention and shared weights: the model once, for sizing.
                **({"weightsGiB": round(fit.model_weights_gib, 2)} if fit.dp > 1 else {}),
                "kvCacheGiBPerGPU": round(fit.kv_cache_gib, 2),
                "overheadGiBPerGPU": round(fit.overhead_gib, 2),
                "usableGiBPerGPU": round(fit.usable_gib, 2),
                **({"loraGiBPerGPU": round(fit.lora_gib, 2)} if fit.lora_gib else {}),
            }
            if fit
            else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """camelCase JSON-ready dict: the contract of `shardwise plan -o json` and status.plan."""
        body = self._body()
        if self.weights is not None:
            body["weights"] = dict(self.weights)
        body["alternatives"] = [
            {**alternative._body(), "rejectedBecause": alternative.rejected_because or ""}
            for alternative in self.alternatives
        ]
        return body
