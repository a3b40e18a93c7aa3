"""The pure side of hosted providers: the catalogue from Providers and Secrets, costs at the
provider's prices, the Envoy cluster per provider, and the key kept out of every output but one."""

from __future__ import annotations

import base64
import decimal
import json

from shardwise.gateway.dataplane import providers as dataplane
from shardwise.gateway.decide import providers

KEY = "sk-live-" + "ab" * 20


def _provider(name: str = "acme", *, created: str = "2026-12-01T00:00:00Z", models=None, **spec) -> dict:
    return {"metadata": {"namespace": "team", "name": name, "creationTimestamp": created},
            "spec": {"baseURL": "https://api.acme.example/openai/v1", "keySecretRef": {"name": f"{name}-key"},
                     "models": models or [{"name": "sonnet", "id": "claude-sonnet-4-5",
                                           "prices": {"input": "3", "cachedInput": "0.30", "output": "15"}}],
                     **spec}}


def _secret(name: str, **data: str) -> dict:
    return {"metadata": {"namespace": "team", "name": name},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def test_a_provider_offers_its_models_under_their_aliases() -> None:
    catalogue = providers.build([_provider()], [_secret("acme-key", key=KEY)])
    hosted = catalogue.get("sonnet")
    assert hosted is not None and hosted.upstream_id == "claude-sonnet-4-5" and hosted.provider == "team/acme"
    upstream = catalogue.upstream_of(hosted)
    assert (upstream.host, upstream.port, upstream.upstream_path("/v1/chat/completions")) == \
        ("api.acme.example", 443, "/openai/v1/chat/completions")
    assert upstream.key == KEY and KEY not in repr(catalogue)
    assert json.loads(providers.rewrite_body({"model": "sonnet", "stream": True}, hosted.upstream_id)) == \
        {"model": "claude-sonnet-4-5", "stream": True}


def test_a_self_hosted_name_is_never_shadowed_and_the_oldest_provider_keeps_a_name() -> None:
    older = _provider("older", created="2026-01-01T00:00:00Z", models=[{"name": "shared"}, {"name": "local"}])
    newer = _provider("newer", created="2026-06-01T00:00:00Z", models=[{"name": "shared"}])
    catalogue = providers.build([newer, older], [_secret("older-key", key=KEY), _secret("newer-key", key=KEY)],
                                self_hosted=["local"])
    assert catalogue.get("local") is None and catalogue.get("shared").provider == "team/older"
    assert len(catalogue.conflicts) == 2


def test_what_makes_a_provider_unusable_is_its_condition_and_it_serves_nothing() -> None:
    cases = {
        providers.SECRET_MISSING: ([_provider()], []),
        providers.KEY_MISSING: ([_provider()], [_secret("acme-key", other=KEY)]),
        providers.CA_MISSING: ([_provider(tls={"caBundleSecretRef": {"name": "acme-ca"}})],
                               [_secret("acme-key", key=KEY), _secret("acme-ca", **{"ca.crt": "not a PEM"})]),
        providers.INVALID: ([_provider(baseURL="http://api.acme.example/v1")], [_secret("acme-key", key=KEY)]),
    }
    for reason, (objects, secrets) in cases.items():
        catalogue = providers.build(objects, secrets)
        assert catalogue.get("sonnet") is None and not catalogue.upstreams, reason
        status, got, message = providers.condition(catalogue.problems["team/acme"])
        assert (status, got) == ("False", reason) and KEY not in message


def test_cost_at_the_provider_prices_converted_to_usd() -> None:
    usd = providers.build([_provider()], [_secret("acme-key", key=KEY)]).get("sonnet").prices
    # 1,000 prompt tokens of which 400 cached, 200 completion: 600 x 3 + 400 x 0.30 + 200 x 15 per 1M
    assert providers.cost_micro_usd(usd, 1000, 200, cached=400) == 600 * 3 + 400 * 0.3 + 200 * 15
    yuan = _provider(currency="CNY", usdPerUnit="0.14", models=[{"name": "ds", "prices": {"input": "2", "output": "3"}}])
    cny = providers.build([yuan], [_secret("acme-key", key=KEY)]).get("ds").prices
    assert cny.output == decimal.Decimal("3") * decimal.Decimal("0.14") / 1_000_000
    assert providers.cost_micro_usd(cny, 1_000_000, 1_000_000) == 700_000  # (2 + 3) yuan x 0.14


def test_the_cluster_checks_the_host_with_the_provider_trust_and_holds_no_key() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    catalogue = providers.build([_provider(tls={"caBundleSecretRef": {"name": "acme-ca"}}, maxConcurrentRequests=5)],
                                [_secret("acme-key", key=KEY), _secret("acme-ca", **{"ca.crt": pem})])
    cluster = dataplane.cluster(catalogue.upstreams["team/acme"])
    tls = cluster["transport_socket"]["typed_config"]
    assert tls["sni"] == "api.acme.example"
    assert tls["common_tls_context"]["validation_context"] == {
        "trusted_ca": {"inline_string": pem.strip()},
        "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "api.acme.example"}}]}
    assert cluster["circuit_breakers"]["thresholds"][0]["max_requests"] == 5
    assert KEY not in json.dumps(cluster)
    dataplane.resource(cluster)  # a valid Envoy Cluster
    system = providers.build([_provider()], [_secret("acme-key", key=KEY)])
    assert dataplane.cluster(system.upstreams["team/acme"], "/etc/ca.pem")["transport_socket"]["typed_config"][
        "common_tls_context"]["validation_context"]["trusted_ca"] == {"filename": "/etc/ca.pem"}
