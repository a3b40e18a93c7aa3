"""The chart's usage export values (docs/usage-export.md) reach `gateway serve` as flags it parses."""

from __future__ import annotations

import argparse

from shardwise.gateway import cli
from tests.unit.chart.chart_support import find


def _serve_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["gateway", "serve", *args])


def test_off_by_default(render) -> None:
    pod = find(render("gateway.enabled=true"), "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]
    assert not [a for a in pod["containers"][1]["args"] if a.startswith("--usage")]
    assert not [v for v in pod["volumes"] if v["name"] == "usage-webhook-secret"]


def test_stdout_and_signed_webhooks(render) -> None:
    objects = render("gateway.enabled=true", "gateway.usageExport.stdout=true",
                     "gateway.usageExport.webhooks={https://a.example/usage,https://b.example/in}",
                     "gateway.usageExport.secretName=usage-signing", "gateway.usageExport.bufferRecords=2000")
    pod = find(objects, "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]
    container = pod["containers"][1]
    parsed = _serve_args(container["args"])
    assert parsed.usage_stdout and parsed.usage_webhook == ["https://a.example/usage", "https://b.example/in"]
    assert parsed.usage_buffer == 2000 and parsed.usage_batch == 500
    mount = next(m for m in container["volumeMounts"] if m["name"] == "usage-webhook-secret")
    assert parsed.usage_webhook_secret_file == f"{mount['mountPath']}/secret"
    volume = next(v for v in pod["volumes"] if v["name"] == "usage-webhook-secret")
    assert volume["secret"]["secretName"] == "usage-signing"
