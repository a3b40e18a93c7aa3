"""One usage record per request, as it leaves the cluster (pure; docs/usage-export.md).

Built from what the observer already reads in Envoy's access log for each request after it
ended, never from a body: no prompt and no completion is in a record, and no API key (only its
id, the APIKey's namespace/name). The tokens and the cost are the ones the key was charged
(`Gatekeeper.charge`), by the same rules: a 2xx response's usage, or the completion tokens a
broken stream streamed before it broke; nothing for an error. The schema is versioned: a field
is only ever added within a version.

Webhook deliveries are signed as Stripe-style receivers check them: `t=<unix seconds>,v1=<hex
HMAC-SHA256 of "<t>.<body>">` with the sink's secret.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import json
import re
from typing import Any

SCHEMA_VERSION = 1
SIGNATURE_HEADER = "x-shardwise-signature"
ENGINE, PROVIDER, GATEWAY = "engine", "provider", "gateway"

_USAGE_KEY = re.compile(r'"usage"\s*:\s*')
_DECODER = json.JSONDecoder()


@dataclasses.dataclass(frozen=True)
class Served:
    """Who answered: an engine (IP:PORT) of a deployment, or a hosted provider (namespace/name)."""

    kind: str  # ENGINE or PROVIDER
    name: str  # the endpoint, or the Provider
    namespace: str | None  # the deployment's or the Provider's


def error_type(code: str, complete: bool) -> str | None:
    """An OpenAI-style error type for what the client got; None for a whole 2xx answer."""
    if code == "reset":
        return "connection_reset"  # no response headers reached the client
    status = int(code) if code.isdigit() else 0
    if 200 <= status < 300:
        return None if complete else "stream_broken"
    if status in (401, 403):
        return "authentication_error" if status == 401 else "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_exceeded"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "server_error"


def charged(code: str, complete: bool, streaming: bool,
            prompt: int | None, completion: int | None) -> tuple[int, int]:
    """(prompt, completion) tokens counted for a response: the observer's charging rules."""
    if not code.startswith("2") or (not complete and not streaming):
        return 0, 0
    return prompt or 0, completion or 0


def cost_micro_usd(completion: int, hosted_micro: int | None, usd_per_million_output: float | None) -> int:
    """The key's charge: a provider's prices when hosted, else completion tokens at the deployment's $/1M."""
    if hosted_micro is not None:
        return hosted_micro
    return round(completion * usd_per_million_output) if usd_per_million_output else 0


def cached_tokens(usage_text: str | None) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` from the observe filter's usage text, if it says."""
    if not usage_text:
        return None
    key = _USAGE_KEY.match(usage_text)
    if key is None:
        return None
    try:
        usage, _ = _DECODER.raw_decode(usage_text, key.end())
    except ValueError:
        return None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0 else None


def build(*, record_id: str, request_id: str, start_unix_s: float | None, key_id: str | None, model: str, served: Served | None,
          code: str, complete: bool, streaming: bool, prompt: int | None, completion: int | None,
          cached: int | None, ttft_s: float | None, duration_s: float | None, cost_micro: int) -> dict[str, Any]:
    """The record (a JSON object); the tokens are the charged ones (`charged`).

    `record_id` is the idempotency key, made by the gateway once per record: Envoy's request id
    can be the client's own `x-request-id`, so two requests may share it."""
    prompt_n, completion_n = charged(code, complete, streaming, prompt, completion)
    when = (datetime.datetime.fromtimestamp(start_unix_s, datetime.timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z") if start_unix_s is not None else None)
    return {
        "version": SCHEMA_VERSION,
        "time": when,
        "id": record_id,
        "request_id": request_id,
        "key_id": key_id,
        "namespace": served.namespace if served is not None else None,
        "model": model,
        "served_by": {"kind": served.kind, "name": served.name} if served is not None else None,
        "status": int(code) if code.isdigit() else None,
        "error_type": error_type(code, complete),
        "error_code": None,
        "stream": streaming,
        "complete": complete,
        "prompt_tokens": prompt_n,
        "completion_tokens": completion_n,
        "cached_tokens": (cached or 0) if prompt_n else 0,
        "ttft_s": round(ttft_s, 6) if ttft_s is not None else None,
        "duration_s": round(duration_s, 6) if duration_s is not None else None,
        "cost_usd": cost_micro / 1e6,
    }


def build_answered(*, record_id: str, request_id: str, start_unix_s: float | None, key_id: str | None,
                   model: str | None, status: int, error_code: str | None) -> dict[str, Any]:
    """The record of a request the gateway answered itself (a refusal: 400, 401, 404, 429, 503...):
    served by the gateway, nothing charged. `model` is "" when the refusal came before the body
    was read (no key, a bad path) or the body named none."""
    record = build(record_id=record_id, request_id=request_id, start_unix_s=start_unix_s, key_id=key_id,
                   model=model or "", served=Served(GATEWAY, "shardwise", None), code=str(status),
                   complete=True, streaming=False, prompt=None, completion=None, cached=None,
                   ttft_s=None, duration_s=None, cost_micro=0)
    record["error_code"] = error_code
    return record


def ndjson(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":"), sort_keys=True).encode() + b"\n" for r in records)


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The signature header's value for a body sent at `timestamp` (unix seconds)."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, header: str, body: bytes, now: int, tolerance_s: int = 300) -> bool:
    """What a receiver checks: a v1 signature over this body, made within the tolerance (replays refused)."""
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        parts.setdefault(name, []).append(value)
    try:
        timestamp = int(parts.get("t", [""])[0])
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, v) for v in parts.get("v1", []))


def backoff_s(attempt: int, random01: float, base_s: float = 0.5, cap_s: float = 30.0) -> float:
    """Full-jitter exponential backoff before retry `attempt` (1, 2, ...)."""
    return random01 * min(cap_s, base_s * 2 ** max(0, attempt - 1))


def retryable(status: int | None) -> bool:
    """A failed delivery worth retrying: no answer, 408, 429 or a 5xx; another 4xx is the receiver's refusal."""
    return status is None or status in (408, 409, 425, 429) or status >= 500
