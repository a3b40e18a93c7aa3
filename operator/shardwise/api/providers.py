"""The Provider custom resource: a hosted OpenAI-compatible API offered behind the gateway's one endpoint.

A Provider names an https base URL, the Secret holding the provider's key (never the key
itself: whoever may read Providers, their prices and their health, need not read Secrets), the
models it offers under the names callers use (each an alias of the provider's own model id,
rewritten in the body on the way out) and their prices, its timeouts, a cap on requests in
flight and how its certificate is checked (the system trust store or a CA bundle from a Secret).

Prices are decimal strings ("2.50"), not floats: they are money, read exactly (Decimal) and
multiplied by token counts; a price that is not a non-negative decimal is refused at admission
by the schema. An `http://` URL is refused at admission with a sentence: the provider key would
cross the network in clear text.

The status has one writer, the gateway replica holding the keys Lease (the same writer as the
APIKeys'): the `Reachable` condition, with a reason naming what is wrong (SecretMissing,
KeyMissing, CABundleMissing, Unreachable, TLSFailed).
"""

from __future__ import annotations

import decimal
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shardwise.api import v1alpha1
from shardwise.api.columns import column

GROUP = v1alpha1.GROUP
VERSION = v1alpha1.VERSION
KIND = "Provider"
PLURAL = "providers"
SINGULAR = "provider"
SHORT_NAMES = ["swprov"]
SECRET_DATA_KEY = "key"  # default data key of the key Secret
CA_DATA_KEY = "ca.crt"  # default data key of the CA bundle Secret

_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_DATA_KEY = r"^[-._a-zA-Z0-9]+$"  # a Secret's data keys
# A price or a rate: digits, an optional fraction; at most 9 + 9 digits (money, not science).
DECIMAL = r"^[0-9]{1,9}(\.[0-9]{1,9})?$"
# A served model name as clients write it (OpenAI's and vLLM's names: org/model:tag and the like).
_MODEL_NAME = r"^[A-Za-z0-9][-A-Za-z0-9._:/@+]*$"

HTTPS_RULE = {"rule": "self.startsWith('https://') && isURL(self)",
              "message": "baseURL must be an https:// URL: the provider key is sent with every request "
                         "and must never cross the network in clear text (http:// is refused)"}
_NOT_ZERO_RULE = {"rule": "!self.matches('^[0.]+$')", "message": "usdPerUnit must be above 0"}


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


def _decimal(description: str, default: str | None = None) -> Any:
    return Field(default, pattern=DECIMAL, max_length=19, description=description)


class SecretKeyRef(_Model):
    name: str = Field(..., min_length=1, max_length=253, pattern=_SECRET_NAME,
                      description="A Secret in the Provider's namespace.")
    key: str = Field(SECRET_DATA_KEY, min_length=1, max_length=253, pattern=_DATA_KEY,
                     description="The data key within it.")


class CASecretRef(SecretKeyRef):
    key: str = Field(CA_DATA_KEY, min_length=1, max_length=253, pattern=_DATA_KEY,
                     description="The data key holding the PEM bundle.")


class Prices(_Model):
    """Per 1M tokens, in the Provider's currency."""

    input: str = _decimal("Per 1M prompt tokens not read from the provider's cache, e.g. \"2.50\".", "0")
    cachedInput: str | None = _decimal("Per 1M prompt tokens the provider read from its cache "
                                       "(usage.prompt_tokens_details.cached_tokens); absent: the input price.")
    output: str = _decimal("Per 1M completion tokens.", "0")


class ProviderModel(_Model):
    name: str = Field(..., min_length=1, max_length=253, pattern=_MODEL_NAME,
                      description="The model name callers send (and /v1/models lists). A name an "
                      "InferenceDeployment also serves stays the self-hosted model's.")
    id: str | None = Field(None, min_length=1, max_length=253,
                           description="The provider's own model id, written into the body's `model` on the "
                           "way out; absent: the same as name.")
    prices: Prices = Field(default_factory=Prices, description="What the provider bills for this model.")

    @property
    def upstream_id(self) -> str:
        return self.id or self.name


class ProviderTLS(_Model):
    caBundleSecretRef: CASecretRef | None = Field(
        None, description="Trust only this PEM bundle (a private or test CA) for the provider's certificate; "
        "absent: the system trust store. The certificate must name the base URL's host either way.")


class ProviderSpec(_Model):
    baseURL: str = Field(..., min_length=1, max_length=2048,
                         description="The OpenAI-compatible API's base, https only, e.g. https://api.openai.com/v1: "
                         "a caller's /v1/chat/completions goes to <baseURL>/chat/completions.",
                         json_schema_extra={"x-kubernetes-validations": [HTTPS_RULE]})
    keySecretRef: SecretKeyRef = Field(..., description="The Secret holding the provider's key, sent as "
                                       "`Authorization: Bearer` by the gateway's data path; never logged, never on "
                                       "a status, never in a metric label or an event.")
    models: list[ProviderModel] = Field(..., min_length=1, max_length=256,
                                        description="The models offered, with their prices.",
                                        json_schema_extra={"x-kubernetes-list-type": "map",
                                                           "x-kubernetes-list-map-keys": ["name"]})
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code the prices are in.")
    usdPerUnit: str = Field("1", pattern=DECIMAL, max_length=19,
                            description="US dollars per unit of the currency (e.g. \"0.14\" for CNY), for "
                            "reporting costs in USD.", json_schema_extra={"x-kubernetes-validations": [_NOT_ZERO_RULE]})
    connectTimeoutSeconds: int = Field(10, ge=1, le=120, description="TCP + TLS connect.")
    requestTimeoutSeconds: int = Field(600, ge=1, le=86_400,
                                       description="The whole request, a stream included, from the gateway's side.")
    maxConcurrentRequests: int = Field(64, ge=1, le=1_000_000,
                                       description="Requests in flight to this provider from each gateway replica; "
                                       "beyond it, 429.")
    tls: ProviderTLS = Field(default_factory=ProviderTLS, description="How the provider's certificate is checked.")

    @field_validator("baseURL")
    @classmethod
    def _https(cls, value: str) -> str:
        if not re.match(r"^https://[^/?#\s]+(/[^?#\s]*)?$", value):
            raise ValueError(HTTPS_RULE["message"])
        return value

    @field_validator("usdPerUnit")
    @classmethod
    def _positive(cls, value: str) -> str:
        if decimal.Decimal(value) <= 0:
            raise ValueError(_NOT_ZERO_RULE["message"])
        return value


class ProviderStatus(_Model):
    conditions: list[v1alpha1.Condition] = Field(
        default_factory=list, description="Reachable: the key Secret, the CA bundle and a TLS handshake with "
        "the base URL's host (reasons Reachable, SecretMissing, KeyMissing, CABundleMissing, Unreachable, TLSFailed).")
    observedGeneration: int | None = Field(None, description="The spec generation the conditions describe.")


def printer_columns() -> list[dict[str, Any]]:
    return [
        column("URL", "string", ".spec.baseURL"),
        column("Reachable", "string", '.status.conditions[?(@.type=="Reachable")].status'),
        column("Reason", "string", '.status.conditions[?(@.type=="Reachable")].reason'),
        column("Models", "string", ".spec.models[*].name", priority=1),
        column("Currency", "string", ".spec.currency", priority=1),
        column("Age", "date", ".metadata.creationTimestamp"),
    ]
