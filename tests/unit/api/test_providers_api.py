"""The Provider kind: its committed CRD is what the models generate, and bad input is refused
with a sentence (an http:// URL, a price that is not a decimal, an exchange rate of zero)."""

from __future__ import annotations

import pathlib
import re

import pydantic
import pytest
import yaml

from shardwise.api import crd, providers

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _spec(**over: object) -> dict[str, object]:
    return {"baseURL": "https://api.example.com/v1", "keySecretRef": {"name": "example-key"},
            "models": [{"name": "gpt-4.1", "prices": {"input": "2.00", "cachedInput": "0.50", "output": "8"}}], **over}


def test_committed_crd_and_chart_copy_match_models() -> None:
    want = crd.render_provider_crd_yaml()
    assert (ROOT / "crds/providers.shardwise.io.yaml").read_text() == want, "stale: run `make crds`"
    assert (ROOT / "charts/shardwise/files/providers.shardwise.io.yaml").read_text() == want


def test_schema_is_structural_with_the_admission_rules() -> None:
    schema = crd.build_provider_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = yaml.safe_dump(schema)
    assert "$ref" not in text and "anyOf" not in text and "title:" not in text
    spec = schema["properties"]["spec"]["properties"]
    assert spec["baseURL"]["x-kubernetes-validations"] == [providers.HTTPS_RULE]
    assert spec["models"]["x-kubernetes-list-type"] == "map"  # two entries of one name: refused
    assert spec["models"]["items"]["properties"]["prices"]["properties"]["output"]["pattern"] == providers.DECIMAL
    assert set(schema["properties"]["spec"]["required"]) == {"baseURL", "keySecretRef", "models"}


def test_a_valid_provider_reads_with_defaults() -> None:
    spec = providers.ProviderSpec.model_validate(_spec())
    assert spec.keySecretRef.key == "key" and spec.currency == "USD" and spec.usdPerUnit == "1"
    assert spec.models[0].upstream_id == "gpt-4.1" and spec.tls.caBundleSecretRef is None


@pytest.mark.parametrize("url", ["http://api.example.com/v1", "api.example.com", "https://", "ftp://x/v1",
                                 "https://api.example.com/v1?x=1"])
def test_not_https_is_refused_with_a_sentence(url: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="must never cross the network in clear text"):
        providers.ProviderSpec.model_validate(_spec(baseURL=url))


@pytest.mark.parametrize("price", ["abc", "-1", "1e3", "1,5", "", "1.", ".5", "NaN", "1234567890"])
def test_a_price_that_is_not_a_decimal_is_refused(price: str) -> None:
    assert not re.match(providers.DECIMAL, price)  # the schema's pattern refuses it at admission too
    with pytest.raises(pydantic.ValidationError):
        providers.ProviderSpec.model_validate(_spec(models=[{"name": "m", "prices": {"output": price}}]))


@pytest.mark.parametrize("price", ["0", "2.50", "0.000001", "123456789.123456789"])
def test_decimal_prices_pass(price: str) -> None:
    providers.ProviderSpec.model_validate(_spec(models=[{"name": "m", "prices": {"input": price}}]))


def test_an_exchange_rate_of_zero_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="usdPerUnit must be above 0"):
        providers.ProviderSpec.model_validate(_spec(currency="CNY", usdPerUnit="0.000"))
    assert providers.ProviderSpec.model_validate(_spec(currency="CNY", usdPerUnit="0.14")).usdPerUnit == "0.14"
