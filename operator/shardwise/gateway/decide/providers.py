"""Hosted providers behind the gateway, decided: which model names they serve, where a request to
one goes, what it costs, and whether a Provider can be used at all. Pure: plain dicts in (the
Provider objects and the Secrets they name, as the informers hold them), plain data out.

A model name an InferenceDeployment serves stays self-hosted: a provider never shadows it (the
spill-over of issue 42 is a later, explicit choice, not a name clash). Two Providers offering
one name: the oldest keeps it, as with deployments (routes.py).

The provider's key is read from its Secret into `Upstream.key`, which is left out of the
dataclass's repr and of every other output here (conditions, model objects, the Envoy cluster):
it goes to Envoy only in the header mutation of a routed request (dataplane/providers.py).
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise.gateway.decide import openai_errors
from shardwise.gateway.decide.openai_errors import Refusal

SECRET_LABEL = "shardwise.io/provider-secret"  # value "true": the gateway lists only these Secrets
MILLION = decimal.Decimal(1_000_000)
_DECIMAL = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,9})?$")
_URL = re.compile(r"^https://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
                  r"(?P<path>/[^?#\s]*)?$")

# The Reachable condition's reasons.
REACHABLE, SECRET_MISSING, KEY_MISSING, CA_MISSING, UNREACHABLE, TLS_FAILED, INVALID = (
    "Reachable", "SecretMissing", "KeyMissing", "CABundleMissing", "Unreachable", "TLSFailed", "InvalidSpec")


@dataclasses.dataclass(frozen=True)
class Prices:
    """USD per token (already converted from the provider's currency)."""

    input: decimal.Decimal
    cached_input: decimal.Decimal
    output: decimal.Decimal


@dataclasses.dataclass(frozen=True)
class Upstream:
    """One Provider as the data path needs it."""

    id: str  # namespace/name: in logs, metrics and the cluster name; never the key
    host: str
    port: int
    base_path: str  # "/v1", "" or "/api/openai/v1": the caller's path after /v1 is appended
    ca_pem: str | None  # None: the system trust store
    connect_timeout_s: int
    request_timeout_s: int
    max_concurrent: int
    key: str = dataclasses.field(repr=False, compare=False, default="")

    @property
    def cluster(self) -> str:
        return f"provider/{self.id}"

    @property
    def is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def upstream_path(self, path: str) -> str:
        """`/v1/chat/completions` at the gateway -> `<base path>/chat/completions` at the provider."""
        return self.base_path + path.removeprefix("/v1")


@dataclasses.dataclass(frozen=True)
class HostedModel:
    """A model name callers send, served by a provider (duck-typed like routes.Route for /v1/models)."""

    model: str
    upstream_id: str  # the provider's own model id
    provider: str  # Upstream.id
    namespace: str
    created: str | None
    prices: Prices


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a Provider cannot be used: its Reachable condition's reason and message (no secret in it)."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Catalogue:
    upstreams: Mapping[str, Upstream]  # by Upstream.id: the usable providers only
    models: Mapping[str, HostedModel]  # by served name
    problems: Mapping[str, Problem]  # by Provider id: those not usable, and why
    conflicts: tuple[str, ...] = ()

    def get(self, model: str) -> HostedModel | None:
        return self.models.get(model)

    def upstream_of(self, hosted: HostedModel) -> Upstream:
        return self.upstreams[hosted.provider]


EMPTY = Catalogue({}, {}, {})


def _decimal(text: Any, default: str = "0") -> decimal.Decimal:
    value = default if text is None else str(text)
    if not _DECIMAL.match(value):  # admission refuses these; an object from before the schema is skipped
        raise ValueError(f"{value!r} is not a decimal number")
    return decimal.Decimal(value)


def parse_base_url(url: str) -> tuple[str, int, str]:
    """host, port, base path of an https:// URL; ValueError for anything else."""
    # A regex, not urllib: the decisions import no HTTP library (.importlinter), parsing included.
    found = _URL.match(url)
    if found is None or not 0 < int(found["port"] or 443) < 65536:
        raise ValueError("baseURL must be an https:// URL without a query")
    host = found["host"].strip("[]").lower()
    return host, int(found["port"] or 443), (found["path"] or "").rstrip("/")


def _secret_value(secret: Mapping[str, Any] | None, key: str) -> str | None:
    if secret is None:
        return None
    raw = (secret.get("data") or {}).get(key)
    if not raw:
        return None
    try:
        return base64.b64decode(raw).decode().strip() or None
    except (ValueError, UnicodeDecodeError):
        return None


def upstream_of(provider: Mapping[str, Any], secrets: Mapping[tuple[str, str], Mapping[str, Any]]) -> Upstream | Problem:
    """A Provider and the Secrets of its namespace ((namespace, name) -> Secret) -> what the data
    path needs, or why it cannot be used."""
    meta, spec = provider.get("metadata") or {}, provider.get("spec") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    try:
        host, port, base_path = parse_base_url(str(spec.get("baseURL", "")))
        _decimal(spec.get("usdPerUnit"), "1")
    except ValueError as exc:
        return Problem(INVALID, str(exc))
    ref = spec.get("keySecretRef") or {}
    secret = secrets.get((ns, ref.get("name", "")))
    if secret is None:
        return Problem(SECRET_MISSING, f"Secret {ref.get('name')!r} not found in {ns!r} (or it lacks the label "
                       f"{SECRET_LABEL}=true the gateway lists Secrets by)")
    key = _secret_value(secret, ref.get("key") or "key")
    if key is None:
        return Problem(KEY_MISSING, f"Secret {ref.get('name')!r} has no non-empty data key {ref.get('key') or 'key'!r}")
    ca_pem = None
    ca_ref = (spec.get("tls") or {}).get("caBundleSecretRef")
    if ca_ref:
        ca_secret = secrets.get((ns, ca_ref.get("name", "")))
        ca_pem = _secret_value(ca_secret, ca_ref.get("key") or "ca.crt")
        if ca_pem is None or "-----BEGIN CERTIFICATE-----" not in ca_pem:
            return Problem(CA_MISSING, f"CA bundle Secret {ca_ref.get('name')!r} missing, unlabelled, or its key "
                           f"{ca_ref.get('key') or 'ca.crt'!r} holds no PEM certificate")
    return Upstream(id=f"{ns}/{name}", host=host, port=port, base_path=base_path, ca_pem=ca_pem,
                    connect_timeout_s=int(spec.get("connectTimeoutSeconds", 10)),
                    request_timeout_s=int(spec.get("requestTimeoutSeconds", 600)),
                    max_concurrent=int(spec.get("maxConcurrentRequests", 64)), key=key)


def _prices(entry: Mapping[str, Any], usd_per_unit: decimal.Decimal) -> Prices:
    p = entry.get("prices") or {}
    per_token = usd_per_unit / MILLION
    cached = p.get("cachedInput")
    return Prices(input=_decimal(p.get("input")) * per_token,
                  cached_input=_decimal(cached if cached is not None else p.get("input")) * per_token,
                  output=_decimal(p.get("output")) * per_token)


def build(providers: Iterable[Mapping[str, Any]], secrets: Iterable[Mapping[str, Any]],
          self_hosted: Iterable[str] = ()) -> Catalogue:
    """The catalogue from the informers' objects. `self_hosted`: the names deployments serve."""
    by_name = {((s.get("metadata") or {}).get("namespace", ""), (s.get("metadata") or {}).get("name", "")): s
               for s in secrets}
    taken = set(self_hosted)
    upstreams: dict[str, Upstream] = {}
    models: dict[str, HostedModel] = {}
    problems: dict[str, Problem] = {}
    conflicts: list[str] = []
    ordered = sorted(providers, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                               (p.get("metadata") or {}).get("namespace", ""),
                                               (p.get("metadata") or {}).get("name", "")))
    for provider in ordered:
        meta, spec = provider.get("metadata") or {}, provider.get("spec") or {}
        pid = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        found = upstream_of(provider, by_name)
        if isinstance(found, Problem):
            problems[pid] = found
            continue
        try:
            usd = _decimal(spec.get("usdPerUnit"), "1")
            offered = [(m["name"], m.get("id") or m["name"], _prices(m, usd)) for m in spec.get("models") or []]
        except (KeyError, TypeError, ValueError) as exc:
            problems[pid] = Problem(INVALID, f"a model entry cannot be read: {exc}")
            continue
        upstreams[pid] = found
        for name, upstream_id, prices in offered:
            if name in taken or name in models:
                owner = "an InferenceDeployment" if name in taken else f"Provider {models[name].provider}"
                conflicts.append(f"model {name!r} of Provider {pid} not routed: {owner} serves it")
                continue
            models[name] = HostedModel(model=name, upstream_id=upstream_id, provider=pid,
                                       namespace=meta.get("namespace", ""), created=meta.get("creationTimestamp"),
                                       prices=prices)
    return Catalogue(upstreams, models, problems, tuple(conflicts))


def rewrite_body(body: Mapping[str, Any], upstream_id: str) -> bytes:
    """The body as the provider gets it: its own model id in place of the alias."""
    return json.dumps({**body, "model": upstream_id}, separators=(",", ":")).encode()


def cost_micro_usd(prices: Prices, prompt: int, completion: int, cached: int = 0) -> int:
    """What one response cost at the provider's prices, in micro-USD (the key counters' unit)."""
    cached = max(0, min(cached, prompt))
    usd = (prompt - cached) * prices.input + cached * prices.cached_input + completion * prices.output
    return int((usd * MILLION).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def over_capacity(provider: str, cap: int) -> Refusal:
    return openai_errors._refusal(  # noqa: SLF001 - the same OpenAI shape as every other refusal
        429, f"Too many requests in flight to provider {provider} (its cap is {cap} per gateway replica); "
        "retry shortly.", "requests", code="rate_limit_exceeded", retry_after_s=1)


def condition(problem: Problem | None) -> tuple[str, str, str]:
    """(status, reason, message) of the Reachable condition before any probe: what the objects say."""
    if problem is None:
        return "True", REACHABLE, "the key and trust settings are in place"
    return "False", problem.reason, problem.message
