"""Who sees usage: the console asks for a key with console access when keys are on, says it is open
when they are off, and the public /metrics carries no series labelled by key."""

from __future__ import annotations

import base64
import types

import prometheus_client
import pytest

from shardwise.gateway import metrics
from shardwise.gateway.console import page as console, web as consoleweb
from shardwise.gateway.decide import consoleaccess, keys
from shardwise.gateway.service import server


def _apikey(name: str, secret: str, **spec: object) -> dict:
    return {"metadata": {"namespace": "ml", "name": name}, "spec": {"secretName": secret, **spec}}


def _secret(name: str, token: str) -> dict:
    return keys.slim_secret({"metadata": {"namespace": "ml", "name": name},
                             "data": {"key": base64.b64encode(token.encode()).decode()}})


APIKEYS = [_apikey("admin", "admin-key", console=True), _apikey("team", "team-key"),
           _apikey("off", "off-key", console=True, disabled=True)]
TABLE = keys.build_table(APIKEYS, [_secret("admin-key", "sk-admin"), _secret("team-key", "sk-team"),
                                   _secret("off-key", "sk-off")])


def _basic(password: str, user: str = "anyone") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_only_enabled_keys_that_say_console_true_are_granted() -> None:
    assert consoleaccess.granted(APIKEYS) == {"ml/admin"}
    assert consoleaccess.granted([_apikey("x", "s", console="true"), {"spec": None}]) == frozenset()


@pytest.mark.parametrize("authorization, expected", [
    (None, 401), ("", 401), ("Bearer sk-nobody", 401), (_basic("sk-nobody"), 401), ("Basic %%%", 401),
    ("Bearer sk-off", 401),  # a disabled key is no key
    ("Bearer sk-team", 403), (_basic("sk-team"), 403),
    ("Bearer sk-admin", 200), ("bearer  sk-admin ", 200), (_basic("sk-admin"), 200), (_basic("sk-admin", ""), 200),
])
def test_the_verdict_for_each_credential(authorization: str | None, expected: int) -> None:
    assert consoleaccess.verdict(authorization, TABLE, consoleaccess.granted(APIKEYS)) == expected


def _gateway(auth: bool) -> types.SimpleNamespace:
    gatekeeper = types.SimpleNamespace(table=TABLE) if auth else None
    keyring = types.SimpleNamespace(apikeys=[types.SimpleNamespace(items=lambda: APIKEYS)]) if auth else None
    settings = server.Settings(auth=object() if auth else None)  # type: ignore[arg-type]
    return types.SimpleNamespace(infds=[], settings=settings, gatekeeper=gatekeeper, keyring=keyring)


def test_with_keys_the_shell_refuses_without_the_right_key_and_shows_nothing_per_key() -> None:
    page = consoleweb.Console(_gateway(auth=True))  # type: ignore[arg-type]
    missing = page.refusal(None)
    assert missing is not None and missing.status == 401
    assert missing.headers["www-authenticate"].startswith("Basic ")
    wrong = page.refusal("Bearer sk-team")
    assert wrong is not None and wrong.status == 403 and "ml/" not in (wrong.text or "")
    assert page.refusal(_basic("sk-admin")) is None


def test_without_keys_the_console_is_open_and_says_so() -> None:
    page = consoleweb.Console(_gateway(auth=False))  # type: ignore[arg-type]
    assert page.refusal(None) is None
    assert 'data-field="access" data-value="open"' in console.render(page.view())
    assert 'data-field="access"' not in console.render(console.View(models=[], keys_enabled=True))


def test_the_public_metrics_leave_out_every_series_labelled_by_key() -> None:
    labelled = [c for c in vars(metrics).values()
                if isinstance(c, prometheus_client.metrics.MetricWrapperBase) and "key" in c._labelnames]
    assert set(labelled) == set(server.PER_KEY)  # a new per-key series must be added to PER_KEY
    metrics.KEY_REQUESTS.labels("ml/alice", "m", "200").inc()
    metrics.RATE_LIMITED.labels("ml/alice", "requests").inc()
    metrics.REQUESTS.labels("m", "200").inc()
    public = prometheus_client.generate_latest(server.WithoutKeys(metrics.REGISTRY)).decode()
    every = prometheus_client.generate_latest(metrics.REGISTRY).decode()
    assert "ml/alice" not in public and "shardwise_gateway_key_" not in public
    assert "shardwise_gateway_rate_limited" not in public and "shardwise_gateway_requests_total" in public
    assert 'shardwise_gateway_key_requests_total{code="200",key="ml/alice",model="m"}' in every
