"""Probes sized from the model: a pod is given as long to start as its weights need to load.

A fixed startup allowance is either too short for the largest models (Llama 3.1 405B moves about
756 GiB into a replica: at 250 MiB/s that alone is 52 minutes, past a 30-minute probe, so the
kubelet would kill it while loading, forever) or far too long to notice a small model stuck at
start. So the startup probe's budget is

    budget = STARTUP_BASE_S + SAFETY x weights of one replica / load bandwidth

with the weights from the plan (GiB per GPU x GPUs per replica: every pod of a group downloads the
checkpoint it shards) and the bandwidth assumed at DEFAULT_LOAD_MIBPS unless the spec says
otherwise (`serving.modelLoadMiBps`: a local NVMe cache loads far faster than a hub download).
STARTUP_BASE_S covers what does not scale with the weights (engine start, CUDA graph capture,
torch.compile, NCCL setup); the budget never drops below MIN_STARTUP_S.

Readiness and liveness start only after the startup probe succeeded, so they stay short: a
replica is taken out of its Service within 15 s of /health failing and restarted after 60 s.
"""

from __future__ import annotations

import math
from typing import Any

PERIOD_S = 10
DEFAULT_LOAD_MIBPS = 250
STARTUP_BASE_S = 600
MIN_STARTUP_S = 900
SAFETY = 1.5


def replica_weights_gib(plan: dict[str, Any]) -> float:
    per_gpu = float(((plan.get("memory") or {}).get("weightsGiBPerGPU")) or 0.0)
    return per_gpu * int(plan.get("gpusPerReplica") or 1)


def startup_budget_s(plan: dict[str, Any], load_mibps: int | None = None) -> int:
    """Seconds the startup probe allows before the kubelet restarts the container."""
    rate = load_mibps or DEFAULT_LOAD_MIBPS
    load_s = replica_weights_gib(plan) * 1024 / rate
    return max(MIN_STARTUP_S, math.ceil(STARTUP_BASE_S + SAFETY * load_s))


def _http(period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failures}


def probes(plan: dict[str, Any], load_mibps: int | None = None) -> dict[str, dict[str, Any]]:
    """startupProbe, readinessProbe and livenessProbe of a serving container."""
    budget = startup_budget_s(plan, load_mibps)
    return {
        "startupProbe": _http(PERIOD_S, math.ceil(budget / PERIOD_S)),
        "readinessProbe": _http(5, 3),
        "livenessProbe": _http(10, 6),
    }
