"""The chart's PrometheusRule: valid rules (`promtool check rules`), a `promtool test rules` unit
test for every alert (tests/fixtures/alerts/), a runbook entry for each in docs/alerts.md, and the
values that shape it."""

from __future__ import annotations

import pathlib
import re
import shutil

import pytest
import yaml
from chart_support import ROOT

from tests import alerting, promtool

FIXTURES = ROOT / "tests" / "fixtures" / "alerts"
RUNBOOK = ROOT / "docs" / "alerts.md"


@pytest.fixture(scope="module")
def rules(helm: pathlib.Path) -> dict:
    return alerting.render_rules(helm)


def test_rules_pass_promtool_check(rules: dict, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = promtool.run("check", "rules", path)
    assert f"SUCCESS: {len(list(alerting.alerts(rules)))} rules found" in out


def test_every_alert_has_a_passing_promtool_unit_test(rules: dict, tmp_path: pathlib.Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(alerting.without_annotations(rules)))
    tests = sorted(FIXTURES.glob("*.test.yaml"))
    for t in tests:
        shutil.copy(t, tmp_path / t.name)
    promtool.run("test", "rules", *(t.name for t in tests), cwd=tmp_path)
    tested = {case["alertname"] for t in tests for group in yaml.safe_load(t.read_text())["tests"]
              for case in group.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert tested == {r["alert"] for r in alerting.alerts(rules)}


def test_every_alert_has_a_summary_and_a_runbook_entry(rules: dict) -> None:
    anchors = {re.sub(r"[^a-z0-9-]", "", h.lower().replace(" ", "-"))
               for h in re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), re.M)}
    for rule in alerting.alerts(rules):
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        assert notes["runbook_url"].endswith("#" + rule["alert"].lower()), rule["alert"]
        assert rule["alert"].lower() in anchors, f"docs/alerts.md has no section {rule['alert']}"
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]


def test_slo_values_shape_the_burn_thresholds(helm: pathlib.Path) -> None:
    tight = alerting.render_rules(helm, "alerts.slo.ttftSeconds=0.25",
                                  json_sets=("alerts.slo.objective=0.99",))
    fast = next(r for r in alerting.alerts(tight) if r["alert"] == "ShardwiseTTFTBudgetBurnFast")
    assert 'le="0.25"' in fast["expr"] and "> 0.144" in fast["expr"]


def test_alerts_are_off_by_default_and_need_the_prometheus_operator_api(helm: pathlib.Path) -> None:
    import subprocess
    base = [str(helm), "template", "rel", str(alerting.CHART)]
    default = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert default.returncode == 0 and "PrometheusRule" not in default.stdout
    refused = subprocess.run([*base, "--set", "alerts.enabled=true"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "monitoring.coreos.com/v1" in refused.stderr
    labelled = subprocess.run([*base, "--api-versions", "monitoring.coreos.com/v1", "--set", "alerts.enabled=true",
                               "--set", "alerts.labels.release=kps"], capture_output=True, text=True, timeout=120)
    rule = next(d for d in yaml.safe_load_all(labelled.stdout) if d and d["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"


@pytest.mark.parametrize("bad", ["alerts.slo.ttftSeconds=0.3", "alerts.slo.objective=1", "alerts.sloo=1",
                                 "alerts.deploymentFor=soon"])
def test_the_schema_refuses_bad_alert_values(helm: pathlib.Path, bad: str) -> None:
    with pytest.raises(AssertionError, match="schema"):
        alerting.render_rules(helm, json_sets=(bad,) if "objective" in bad else (), *(() if "objective" in bad else (bad,)))
