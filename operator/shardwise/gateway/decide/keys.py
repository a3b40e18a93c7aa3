"""The key table: which bearer token is which caller, and what that caller may do (pure).

Built from two informer stores as plain dicts: APIKey objects (policy) and the Secrets labelled
`shardwise.io/api-key: "true"` (key material). A Secret never reaches this module with its key:
the informer's transform (`slim_secret`) replaces `data` by the key's sha256 on arrival, so the
plaintext is never stored, logged or compared; a request's bearer token is hashed and looked up.
The transform also notes (a flag, nothing more) whether client-side `kubectl apply` left the key
in the Secret's last-applied annotation: the key stays usable and its status warns.

A key's stable id is `namespace/name` of its APIKey: metrics and the status use it, never the key.
An APIKey whose Secret is missing, not labelled, has no `key`, or shares its key with another
APIKey is not usable and says why (the `Ready` condition); nothing here raises on a bad object.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise.api import apikeys
from shardwise.gateway.decide import budget as budget_

Obj = Mapping[str, Any]
HASH_FIELD = "keySha256"  # where slim_secret puts the hash (the Secret's data is dropped)
LEAKED_FIELD = "keyInLastApplied"  # slim_secret: the key is also in the last-applied annotation
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ANONYMOUS = "anonymous"


@dataclasses.dataclass(frozen=True)
class Key:
    id: str  # namespace/name of the APIKey
    models: frozenset[str]  # empty: every model
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    budget: budget_.Budget | None = None  # a spend budget per period (decide/budget.py)
    # what the status says was spent in `spent_period` (its start), micro-USD: where a restarted
    # replica starts counting the period from
    spent_period: str | None = None
    spent_micro: int = 0

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.requests_per_minute, self.tokens_per_minute, self.max_concurrent,
                                           self.budget))


@dataclasses.dataclass(frozen=True)
class KeyTable:
    by_hash: Mapping[str, Key]
    problems: Mapping[str, str]  # APIKey id -> why it is not usable
    hashes: Mapping[str, str] = dataclasses.field(default_factory=dict)  # APIKey id -> its key's sha256
    warnings: Mapping[str, str] = dataclasses.field(default_factory=dict)  # usable APIKey id -> what to fix

    def lookup(self, token: str) -> Key | None:
        return self.by_hash.get(hash_key(token))


def hash_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def slim_secret(secret: dict[str, Any]) -> dict[str, Any]:
    """The informer's transform: metadata and the key's sha256; the key itself is dropped here."""
    meta = secret.get("metadata") or {}
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion", "labels")
                                        if k in meta}}
    raw = (secret.get("data") or {}).get(apikeys.SECRET_DATA_KEY)
    if isinstance(raw, str):
        try:
            token = base64.b64decode(raw, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            token = ""
        if token:
            out[HASH_FIELD] = hash_key(token)
            if _in_last_applied(meta.get("annotations"), token):
                out[LEAKED_FIELD] = True
    return out


def _in_last_applied(annotations: Any, token: str) -> bool:
    """Whether client-side `kubectl apply` left the key in its annotation (read here, then dropped).

    The annotation is the applied manifest as JSON: the key sits in `stringData.key` as text or in
    `data.key` as base64. A manifest that is not JSON is searched as text for either spelling.
    """
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str) or not text:
        return False
    try:
        applied = json.loads(text)
    except ValueError:
        applied = None
    if not isinstance(applied, Mapping):
        return token in text or base64.b64encode(token.encode()).decode() in text
    string_data, data = applied.get("stringData"), applied.get("data")
    plain = string_data.get(apikeys.SECRET_DATA_KEY) if isinstance(string_data, Mapping) else None
    encoded = data.get(apikeys.SECRET_DATA_KEY) if isinstance(data, Mapping) else None
    if isinstance(plain, str) and plain.strip() == token:
        return True
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded, validate=True).decode().strip() == token
        except (binascii.Error, UnicodeDecodeError):
            return False
    return False


def key_id(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _policy(obj: Obj) -> Key | str:
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return "spec is not an object"
    models = spec.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        return "spec.models must be a list of served model names"
    limits: dict[str, int | None] = {}
    for field in ("requestsPerMinute", "tokensPerMinute", "maxConcurrentRequests"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"spec.{field} must be a positive integer"
        limits[field] = value
    budget = budget_.parse(spec.get("budgetUSD"), spec.get("budgetPeriod"))
    if isinstance(budget, str):
        return budget
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    try:
        spent_micro = round(float(status.get("periodCostUSD") or 0) * 1_000_000)
    except (TypeError, ValueError):
        spent_micro = 0
    return Key(id=key_id(obj), models=frozenset(models), requests_per_minute=limits["requestsPerMinute"],
               tokens_per_minute=limits["tokensPerMinute"], max_concurrent=limits["maxConcurrentRequests"],
               budget=budget, spent_period=status.get("periodStart") if budget is not None else None,
               spent_micro=spent_micro if budget is not None else 0)


def build_table(api_keys: Iterable[Obj], secrets: Iterable[Obj]) -> KeyTable:
    """The table from the two stores (deterministic whatever their order)."""
    secret_hash: dict[tuple[str, str], Any] = {}
    leaked: set[tuple[str, str]] = set()
    for s in secrets:
        where = ((s.get("metadata") or {}).get("namespace") or "", (s.get("metadata") or {}).get("name") or "")
        secret_hash[where] = s.get(HASH_FIELD)
        if s.get(LEAKED_FIELD):
            leaked.add(where)
    by_hash: dict[str, Key] = {}
    problems: dict[str, str] = {}
    hashes: dict[str, str] = {}
    warnings: dict[str, str] = {}
    for obj in sorted(api_keys, key=key_id):
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        ident = key_id(obj)
        spec = obj.get("spec") or {}
        secret_name = spec.get("secretName") if isinstance(spec, Mapping) else None
        if not isinstance(secret_name, str) or not secret_name:
            problems[ident] = "spec.secretName is missing"
            continue
        if isinstance(spec, Mapping) and spec.get("disabled"):
            problems[ident] = "disabled (spec.disabled: true)"
            continue
        where = (meta.get("namespace") or "", secret_name)
        if where not in secret_hash:
            problems[ident] = (f"Secret {secret_name} not found (or not labelled "
                               f"{apikeys.SECRET_LABEL}=true)")
            continue
        digest = secret_hash[where]
        if not digest:
            problems[ident] = f"Secret {secret_name} has no data key `{apikeys.SECRET_DATA_KEY}`"
            continue
        policy = _policy(obj)
        if isinstance(policy, str):
            problems[ident] = policy
            continue
        holder = by_hash.get(digest)
        if holder is not None:  # the first by id keeps it: one key is one caller
            problems[ident] = f"its key is already the key of {holder.id}"
            continue
        by_hash[digest] = policy
        hashes[ident] = digest
        if where in leaked:  # the key keeps working: refusing it would break callers over a copy
            warnings[ident] = (
                f"Secret {secret_name} carries the key in plain text in its annotation {LAST_APPLIED} "
                f"(it was created or changed with client-side `kubectl apply`): anyone who can read the "
                f"Secret's metadata can read the key. Remove the annotation (`kubectl annotate secret "
                f"{secret_name} {LAST_APPLIED}-`) and rotate the key; create key Secrets with "
                f"`kubectl create secret generic ... --from-literal=key=...` or `kubectl apply --server-side`")
    return KeyTable(by_hash=by_hash, problems=problems, hashes=hashes, warnings=warnings)
