"""`serve --usage-stdout` wiring: the gateway's Export names the engine or provider that served,
and prices a record as the key is charged (the deployment's $/1M, or the Provider's prices)."""

from __future__ import annotations

import base64
import io
import json

from shardwise.gateway.decide import holding, providers, records, routes
from shardwise.gateway.service import server
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.service.observer import Observation

USAGE = '"usage":{"prompt_tokens":1000,"completion_tokens":500,"prompt_tokens_details":{"cached_tokens":400}}}'


def _observation(model: str, endpoint: str | None) -> Observation:
    return Observation(model=model, key_id="team/k", code="200", complete=True, ttft_s=0.1, e2e_s=0.2, events=None,
                       usage=USAGE, endpoint=endpoint, request_id="r", start_unix_s=1.0)


def test_the_gateway_exports_what_served_and_what_it_cost() -> None:
    gateway = server.Gateway(None, server.Settings(usage_stdout=True, providers=True))  # type: ignore[arg-type]
    out = io.StringIO()
    gateway.export.sinks[0].stream = out
    gateway.dispatcher = Dispatcher(holding.Limits(), on_wake=lambda route: None)
    gateway.dispatcher.set_table(routes.Table(routes={"local": routes.Route(
        model="local", namespace="team", name="local", endpoints=("10.0.0.9:8000",), scale_to_zero=False,
        desired_replicas=1, usd_per_million_output_tokens=4.0)}))
    provider = {"metadata": {"namespace": "vendors", "name": "acme", "creationTimestamp": "2026-12-01T00:00:00Z"},
                "spec": {"baseURL": "https://api.acme.example/v1", "keySecretRef": {"name": "acme-key"},
                         "models": [{"name": "hosted", "id": "acme-1",
                                     "prices": {"input": "2", "cachedInput": "1", "output": "10"}}]}}
    secret = {"metadata": {"namespace": "vendors", "name": "acme-key"},
              "data": {"key": base64.b64encode(b"sk-provider").decode()}}
    gateway.providers.set_catalogue(providers.build([provider], [secret], self_hosted=["local"]))
    gateway.export(_observation("local", "10.0.0.9:8000"))
    gateway.export(_observation("hosted", None))
    local, hosted = (json.loads(line)["usage"] for line in out.getvalue().splitlines())
    assert local["served_by"] == {"kind": records.ENGINE, "name": "10.0.0.9:8000"} and local["namespace"] == "team"
    assert local["cost_usd"] == 500 * 4.0 / 1e6
    assert hosted["served_by"]["kind"] == records.PROVIDER and hosted["namespace"] == "vendors"
    assert "acme" in hosted["served_by"]["name"]
    # the provider's prices: 600 uncached x $2 + 400 cached x $1 + 500 x $10, per 1M
    assert hosted["cost_usd"] == (600 * 2 + 400 * 1 + 500 * 10) / 1e6
    assert hosted["cached_tokens"] == 400
    assert "sk-provider" not in out.getvalue()
