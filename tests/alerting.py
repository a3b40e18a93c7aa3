"""The chart's alert rules and dashboard queries as plain data, for the unit and e2e tests.

Rules are taken from `helm template` of the chart itself (never copied by hand): the
PrometheusRule's `spec.groups` is a Prometheus rules file as it stands.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "shardwise"
DASHBOARDS = CHART / "dashboards"


def render_rules(helm: pathlib.Path, *sets: str, json_sets: tuple[str, ...] = ()) -> dict[str, Any]:
    """The PrometheusRule's groups of `helm template --set alerts.enabled=true SETS...`
    (`json_sets` go to --set-json: numbers that --set would pass as strings)."""
    args = [str(helm), "template", "rel", str(CHART), "--namespace", "sw-system",
            "--api-versions", "monitoring.coreos.com/v1", "--set", "alerts.enabled=true",
            *[a for s in sets for a in ("--set", s)], *[a for s in json_sets for a in ("--set-json", s)]]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rules = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "PrometheusRule"]
    assert len(rules) == 1, [r["metadata"]["name"] for r in rules]
    return {"groups": rules[0]["spec"]["groups"]}


def alerts(rules: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in rules["groups"]:
        yield from (r for r in group["rules"] if "alert" in r)


def without_annotations(rules: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(rules)
    for rule in alerts(out):
        rule.pop("annotations", None)
    return out


def with_for(rules: dict[str, Any], for_: str) -> dict[str, Any]:
    """The same rules with every alert's `for` replaced (an e2e cannot wait the real ones)."""
    out = copy.deepcopy(rules)
    for rule in alerts(out):
        rule["for"] = for_
    return out


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panel_queries() -> Iterator[tuple[str, str, str]]:
    """(dashboard, panel title, expr) for every target of every panel, and every variable query."""
    for name, board in dashboards().items():
        for panel in board["panels"]:
            for t in panel["targets"]:
                yield name, panel["title"], t["expr"]


def variable_queries() -> Iterator[tuple[str, str, str]]:
    """(dashboard, variable, expr) of every `label_values(EXPR, label)` variable: the EXPR."""
    for name, board in dashboards().items():
        for var in board["templating"]["list"]:
            if var.get("type") == "query":
                found = re.fullmatch(r"label_values\((.+),\s*[a-zA-Z_]+\)", var["query"]["query"])
                assert found, var["query"]["query"]
                yield name, var["name"], found.group(1)


def concrete(expr: str, rate_interval: str = "1m") -> str:
    """A panel's expr with Grafana's variables filled in: every value (".*"), `rate_interval`."""
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$\{?[a-z_]+\}?", ".*", expr)


_FUNCTIONS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "delta", "changes", "absent",
    "histogram_quantile", "label_values", "topk", "bottomk", "quantile", "clamp_min", "vector",
}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
             "bool", "offset"}


def metric_names(expr: str) -> set[str]:
    """Every metric name an expr selects: identifiers left once strings, label matchers, ranges,
    grouping clauses, numbers, functions and keywords are gone."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        word = match.group(0)
        rest = s[match.end():].lstrip()
        if word in _KEYWORDS or word in _FUNCTIONS or rest.startswith("("):
            continue
        names.add(word)
    return names
