"""Prefill-only and decode-only engines: which role an engine plays and what its KV hand-off costs.

The operator renders each role with vLLM's `--kv-transfer-config` (render/disaggregation.py). The
role is read from it as vLLM reads it: `kv_producer` computes KV and hands it on (prefill),
`kv_consumer` loads KV (decode). NixlConnector and LMCacheConnectorV1 render `kv_both` for both
roles, so there the argv alone cannot tell, and the pod's `shardwise.io/role` label decides.

What the simulator imitates of the protocol vLLM's own P/D proxy and llm-d's sidecar use
(SERVING-SHAPES.md C): a prefill engine answers with `kv_transfer_params` beside the completion;
a decode engine given a request that carries them loads the prompt's KV instead of computing it,
so its first token costs the hand-off and one decode step, not a prefill. A decode engine given
a request without them prefills it itself (vLLM: the connector finds nothing and the engine
computes the prompt), so traffic that bypasses a P/D router is still answered.

The hand-off's cost is `fixed + prompt tokens x KV bytes per token / bandwidth`. These are the
simulator's assumptions, not measurements: KV bytes per token of an 8B-class GQA model in bf16
(32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB); NIXL at 50 GB/s (one 400 Gb/s
RDMA NIC; the same node over NVLink is faster); LMCache at 25 GB/s; the example connector writes
and reads safetensors files on a shared folder, 2 GB/s each way, plus a file open per layer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PREFILL = "prefill"
DECODE = "decode"
ROLE_LABEL = "shardwise.io/role"
KV_BYTES_PER_TOKEN = 128 * 1024
# connector -> (fixed seconds, bytes per second)
COSTS: dict[str, tuple[float, float]] = {
    "NixlConnector": (0.5e-3, 50e9),
    "LMCacheConnectorV1": (1e-3, 25e9),
    "ExampleConnector": (5e-3, 1e9),  # written then read: 2 GB/s each way
}
DEFAULT_COST = COSTS["NixlConnector"]


def kv_transfer_config(text: str | None) -> dict[str, Any] | None:
    """vLLM's --kv-transfer-config JSON, or None when absent or not a JSON object (vLLM refuses it)."""
    if not text:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def role_of(config: Mapping[str, Any] | None, labels: Mapping[str, str]) -> str | None:
    """prefill, decode, or None (an aggregated engine: no connector, or kv_both with no role label)."""
    if config is None:
        return None
    kv_role = config.get("kv_role")
    if kv_role == "kv_producer":
        return PREFILL
    if kv_role == "kv_consumer":
        return DECODE
    label = labels.get(ROLE_LABEL)
    return label if kv_role == "kv_both" and label in (PREFILL, DECODE) else None


def handoff_s(connector: str | None, prompt_tokens: int, kv_bytes_per_token: int = KV_BYTES_PER_TOKEN) -> float:
    """Seconds to move one prompt's KV from its prefill engine to its decode engine."""
    fixed, bandwidth = COSTS.get(connector or "", DEFAULT_COST)
    return fixed + max(0, prompt_tokens) * kv_bytes_per_token / bandwidth


def transfer_params(host: str, port: int, request_id: str) -> dict[str, Any]:
    """What a prefill engine returns for the decode engine (the keys NixlConnector's request_finished
    gives): where the KV is and that the decode side must pull it."""
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": request_id,
            "remote_host": host, "remote_port": port, "remote_block_ids": []}
