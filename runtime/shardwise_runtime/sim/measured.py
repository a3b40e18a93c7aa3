"""Base latencies of a simulated engine from measured figures (measured.yaml), not predictions.

A pod says what it runs: the GPU product (its node affinity), the model's parameter count
(annotation shardwise.io/model-parameters, a fact the operator copies from its catalog), the
weight format and TP/PP (its `vllm serve` arguments). The engine's single-request ITL scales the
nearest measured anchor by weight bytes read per GPU over HBM bandwidth; its TTFT scales an anchor
that measured TTFT by prompt FLOPs per GPU over tensor throughput. Two deliberately simple rules:
the operator's planner models overheads, all-reduces and batching on its own, so the status's
predicted-versus-observed ratio compares two independent estimates, as it would on real GPUs.
A pod annotation shardwise.io/sim-slowdown (e.g. "1.5") multiplies both, to test how the operator
reacts to engines slower than it predicted.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

REFERENCE_PROMPT_TOKENS = 512  # the prompt length EngineConfig.ttft_ms is for (latency.py)
_MIN_ITL_MS = 1.0


@dataclass(frozen=True)
class Anchor:
    gpu: str
    parameters_b: float
    weight_bytes: float
    tp: int
    itl_ms: float
    ttft_ms: float | None
    prompt_tokens: int | None


@functools.cache
def _table() -> tuple[dict[str, dict[str, float]], tuple[Anchor, ...]]:
    text = resources.files(__package__).joinpath("measured.yaml").read_text(encoding="utf-8")
    raw: dict[str, Any] = yaml.safe_load(text)
    anchors = tuple(
        Anchor(
            gpu=str(a["gpu"]),
            parameters_b=float(a["parametersB"]),
            weight_bytes=float(a["weightBytes"]),
            tp=int(a["tp"]),
            itl_ms=float(a["itlMs"]),
            ttft_ms=float(a["ttftMs"]) if "ttftMs" in a else None,
            prompt_tokens=int(a["promptTokens"]) if "promptTokens" in a else None,
        )
        for a in raw["anchors"]
    )
    return raw["gpus"], anchors


def _gpu(product: str) -> dict[str, float] | None:
    gpus, _ = _table()
    wanted = product.upper().replace("-SHARED", "")
    for name, facts in gpus.items():
        if name.upper() == wanted or wanted.startswith(name.upper()):
            return facts
    return None


def _read_ms(anchor: Anchor) -> float:
    """Milliseconds for one GPU of the anchor to read its weights once (the ITL it scales)."""
    facts = _gpu(anchor.gpu)
    assert facts is not None, anchor.gpu
    return anchor.parameters_b * 1e9 * anchor.weight_bytes / anchor.tp / facts["memoryBandwidthGBps"] / 1e6


def base_latencies(product: str, parameters: float, weight_bytes: float, tp: int,
                   pp: int = 1) -> tuple[float, float] | None:
    """(TTFT ms for a 512-token prompt, ITL ms) for one request, or None for an unknown GPU."""
    facts = _gpu(product)
    if facts is None or parameters <= 0 or weight_bytes <= 0 or tp < 1 or pp < 1:
        return None
    _, anchors = _table()
    read_ms = parameters * weight_bytes / tp / facts["memoryBandwidthGBps"] / 1e6
    nearest = min(anchors, key=lambda a: (a.gpu != product, abs(math.log(read_ms / _read_ms(a)))))
    itl = max(_MIN_ITL_MS, nearest.itl_ms * read_ms / _read_ms(nearest))
    timed = [a for a in anchors if a.ttft_ms is not None and a.prompt_tokens]
    first = min(timed, key=lambda a: (a.gpu != product, abs(math.log(read_ms / _read_ms(a)))))
    first_facts = _gpu(first.gpu)
    assert first_facts is not None and first.ttft_ms is not None and first.prompt_tokens
    flop_ms = parameters * REFERENCE_PROMPT_TOKENS / tp / facts["bf16Tflops"]
    anchor_flop_ms = first.parameters_b * 1e9 * first.prompt_tokens / first.tp / first_facts["bf16Tflops"]
    ttft = first.ttft_ms * flop_ms / anchor_flop_ms
    # One request crosses PP stages one after another, so PP changes neither figure here: each
    # stage reads 1/PP of the weights (already in `read_ms` through TP only) in turn.
    return max(ttft, itl), itl
