"""The APIKey custom resource: one caller of the gateway, its quota, and its usage so far.

The key material lives in a Secret (`spec.secretName`, data key `key`, labelled
`shardwise.io/api-key: "true"`) in the APIKey's namespace: whoever may read the APIKey (its
quota, its usage and cost) never sees the key itself, and RBAC on Secrets stays the guard of the
key. The gateway keeps only a sha256 of it. Bounds on the quota are enforced at admission by the
CRD schema generated from these models (a zero or negative limit is refused, not a crash).

The status has one writer, the gateway replica that holds the `shardwise-gateway-keys` Lease;
usage counts are cumulative since the APIKey was created.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shardwise.api import v1alpha1
from shardwise.api.columns import column

GROUP = v1alpha1.GROUP
VERSION = v1alpha1.VERSION
KIND = "APIKey"
PLURAL = "apikeys"
SINGULAR = "apikey"
SHORT_NAMES = ["swkey"]
SECRET_LABEL = "shardwise.io/api-key"  # value "true" on the Secret holding the key
SECRET_DATA_KEY = "key"

# Kubernetes object names are DNS subdomains; a Secret's name is at most 253 characters.
_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class APIKeySpec(_Model):
    secretName: str = Field(..., min_length=1, max_length=253, pattern=_SECRET_NAME,
                            description="The Secret in this namespace holding the key under data key `key`; it "
                            "must carry the label shardwise.io/api-key=true (the gateway watches only those).")
    models: list[str] = Field(default_factory=list, max_length=256,
                              description="Served model names this key may use; empty: every model.")
    requestsPerMinute: int | None = Field(None, ge=1, le=10_000_000,
                                          description="Requests per minute (token bucket, burst = one minute's "
                                          "worth); absent: unlimited.")
    tokensPerMinute: int | None = Field(None, ge=1, le=10_000_000_000,
                                        description="Prompt + completion tokens per minute, charged from each "
                                        "response's usage (token bucket); absent: unlimited.")
    maxConcurrentRequests: int | None = Field(None, ge=1, le=1_000_000,
                                              description="Requests in flight at once; absent: unlimited.")
    budgetUSD: str | None = Field(None, pattern=r"^[0-9]{1,9}(\.[0-9]{1,6})?$", max_length=16,
                                  description="Spend budget in USD per budgetPeriod, a decimal string (\"25\", "
                                  "\"0.50\"): once the period's cost (self-hosted and hosted) reaches it, requests "
                                  "are refused with 429 (type budget, code insufficient_quota, Retry-After to the "
                                  "period's end) and the Budget condition is False; absent: no budget.")
    budgetPeriod: Literal["Day", "Month"] = Field("Month", description="The budget's period: a calendar day "
                                                  "or month in UTC.")
    disabled: bool = Field(False, description="Refuse this key (401) without deleting it.")
    console: bool = Field(False, description="This key also opens the gateway's /console (usage and cost of "
                          "every key); without it the console answers 403. Only with `serve --auth`.")


class APIKeyStatus(_Model):
    requests: int = Field(0, description="Requests answered by an engine with this key.")
    promptTokens: int = Field(0, description="Prompt tokens, from the engines' usage.")
    completionTokens: int = Field(0, description="Completion tokens, from the engines' usage.")
    totalTokens: int = Field(0, description="promptTokens + completionTokens.")
    costUSD: float = Field(0.0, description="Completion tokens priced at the serving deployment's "
                           "status.cost.perMillionOutputTokensUSD.")
    periodStart: str | None = Field(None, description="Start of the budget period periodCostUSD counts (RFC 3339, "
                                    "UTC); only with a budget.")
    periodCostUSD: float = Field(0.0, description="Cost in USD in the budget period starting periodStart.")
    rateLimited: int = Field(0, description="Requests refused with 429 for this key's limits.")
    lastUsed: str | None = Field(None, description="When usage last moved (RFC 3339), as the status writer saw it.")
    keyId: str | None = Field(None, description="The first 12 hex digits of the key's sha256 (not the key).")
    conditions: list[v1alpha1.Condition] = Field(default_factory=list,
                                                 description="Ready (key usable), QuotaShared (limits held "
                                                 "across gateway replicas through Redis), Budget (with a "
                                                 "budget: WithinBudget or BudgetExceeded).")
    observedGeneration: int | None = Field(None, description="The spec generation the conditions describe.")


def printer_columns() -> list[dict[str, Any]]:
    return [
        column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        column("Models", "string", ".spec.models", priority=1),
        column("RPM", "integer", ".spec.requestsPerMinute"),
        column("TPM", "integer", ".spec.tokensPerMinute"),
        column("Requests", "integer", ".status.requests"),
        column("Tokens", "integer", ".status.totalTokens"),
        column("Cost-USD", "number", ".status.costUSD"),
        column("Budget", "string", '.status.conditions[?(@.type=="Budget")].reason', priority=1),
        column("Shared", "string", '.status.conditions[?(@.type=="QuotaShared")].status', priority=1),
        column("Age", "date", ".metadata.creationTimestamp"),
    ]
