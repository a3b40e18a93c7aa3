"""Observability end to end: a real Prometheus scraping the local operator, a FrontDoor gateway and
the simulated engines; the chart's dashboards and alerts evaluated on it; the console in headless
Chromium against the InferenceDeployments' status.

One module fixture (a small fleet: two models behind one gateway, light steady traffic) serves
every test. Prometheus (Debian's `prometheus`) runs on 127.0.0.1 with a generated scrape config
(1 s interval) and the chart's rules rendered with an unreachable TTFT bound (0.001 s) and every
`for` set to 0 s, derived from `helm template` by tests/alerting.py, never copied.
"""

from __future__ import annotations

import collections
import html.parser
import json
import pathlib
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from shardwise.devcluster import binaries
from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from shardwise.devcluster.processes import Process, free_port
from tests import alerting, promtool
from tests.e2e.support import Kubectl, eventually, simulated_fleet

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ("obs-a", "obs-b")
SCREENSHOT = ROOT / "docs" / "console.png"
RATE = "20s"

# Queries allowed to return nothing in this fleet, by a metric they select, with the reason.
ALLOWED_EMPTY = {
    "shardwise_reconcile_errors_total": "no reconcile raised (the counter has no labelled child until one does)",
    "shardwise_gateway_key_": "API keys are not enabled on this gateway",
    "shardwise_gateway_rate_limited_total": "API keys are not enabled on this gateway",
    "shardwise_gateway_quota_store_up": "API keys are not enabled (no quota store)",
    "shardwise_gateway_held_requests": "nothing is held: both models have ready replicas",
    "shardwise_gateway_shed_requests_total": "nothing is shed: no hold queue fills",
    "shardwise_gateway_wake_signals_total": "no model is at zero",
    "shardwise_gateway_broken_responses_total": "no stream breaks",
    "shardwise_deployment_model_cache_": "the fleet downloads nothing (no model cache in the local fleet)",
}


def _manifest(name: str) -> str:
    return json.dumps({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "metadata": {"name": name},
                       "spec": {"model": {"name": "mistralai/Mistral-7B-Instruct-v0.3", "servedName": name},
                                "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
                                "parallelism": {"objective": "Cost"},
                                "placement": {"gpuProducts": ["NVIDIA-A100-80GB-PCIe"]}, "replicas": 1}})


class Fleet:
    def __init__(self, kubectl: Kubectl, door: FrontDoor, operator_port: int, prometheus: str) -> None:
        self.kubectl, self.door, self.operator_port, self.prometheus = kubectl, door, operator_port, prometheus

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert reply["status"] == "success", (expr, reply)
        return reply["data"]["result"]

    def statuses(self) -> dict[str, dict[str, Any]]:
        items = self.kubectl.get("infd")["items"]
        return {f"{i['metadata']['namespace']}/{i['metadata']['name']}": i.get("status") or {} for i in items}


def _traffic(door: FrontDoor, stop: threading.Event) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            for model in MODELS:
                try:
                    client.post(f"{door.base_url}/completions", json={"model": model, "prompt": "hello there",
                                                                      "max_tokens": 4})
                except httpx.HTTPError:
                    pass
            stop.wait(0.2)


def _prometheus_config(fleet_pods: list[str], operator_port: int, gateway_port: int, rules: pathlib.Path) -> str:
    return yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "operator", "static_configs": [{"targets": [f"127.0.0.1:{operator_port}"]}]},
            {"job_name": "gateway", "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}]},
            {"job_name": "engines", "static_configs": [{"targets": [f"{ip}:8000" for ip in fleet_pods]}]},
        ]})


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, operator: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if not shutil.which("prometheus"):
        pytest.fail("prometheus is missing: run hack/install-deps.sh (Debian package `prometheus`)")
    namespace = f"obs-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    kubectl = Kubectl(cluster, namespace)
    work = tmp_path_factory.mktemp("prometheus")
    sim = simulated_fleet(cluster, namespace, "obs")
    door = FrontDoor(cluster.kubeconfig, cluster.log_dir, name=f"obs-gw-{namespace}", namespaces=(namespace,),
                     envoy_concurrency=1)
    stop = threading.Event()
    prometheus: Process | None = None
    sim.start()
    try:
        for name in MODELS:
            kubectl.apply_yaml(_manifest(name))
        door.start()
        eventually(lambda: all(httpx.post(f"{door.base_url}/completions", timeout=10,
                                          json={"model": m, "prompt": "hi", "max_tokens": 1}).status_code == 200
                               for m in MODELS), timeout=90, what="both models served")
        threading.Thread(target=_traffic, args=(door, stop), daemon=True).start()
        pods = kubectl.get("pods", selector="shardwise.io/inference-deployment")["items"]
        ips = [p["status"]["podIP"] for p in pods if p["status"].get("podIP")]
        assert len(ips) == len(MODELS), ips
        helm = binaries.find_binaries()["helm"]
        rules = alerting.with_for(alerting.render_rules(helm, "alerts.slo.ttftSeconds=0.001"), "0s")
        (work / "rules.yaml").write_text(yaml.safe_dump(rules))
        (work / "prometheus.yml").write_text(_prometheus_config(ips, operator.metrics_port, door.metrics_port,
                                                                work / "rules.yaml"))
        port = free_port()
        prometheus = Process(f"prometheus-{namespace}", [
            "prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], cluster.log_dir / f"prometheus-{namespace}.log")
        prometheus.start()
        setup = Fleet(kubectl, door, operator.metrics_port, f"http://127.0.0.1:{port}")
        eventually(lambda: len(setup.query('up == 1')) == 2 + len(ips), timeout=30, what="every target up")
        eventually(lambda: setup.query(f"sum(rate(vllm:time_to_first_token_seconds_count[{RATE}])) > 0"),
                   timeout=45, what="engine histograms moving in Prometheus")
        eventually(lambda: all(s.get("latency", {}).get("ttftP95Ms") for s in setup.statuses().values()),
                   timeout=45, what="TTFT on every status")
        yield setup
    finally:
        stop.set()
        if prometheus is not None:
            prometheus.stop()
        door.stop()
        sim.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


# ... or by a matcher in them.
ALLOWED_EMPTY_MATCHERS = {'code=~"5..|reset"': "no 5xx or reset in a healthy fleet"}


def _allowed(expr: str) -> str | None:
    return next((why for name, why in ALLOWED_EMPTY.items()
                 if any(n.startswith(name) for n in alerting.metric_names(expr))), None) or next(
        (why for matcher, why in ALLOWED_EMPTY_MATCHERS.items() if matcher in expr), None)


def test_every_metrics_body_passes_promtool(fleet: Fleet) -> None:
    operator = httpx.get(f"http://127.0.0.1:{fleet.operator_port}/metrics", timeout=10).text
    assert "shardwise_deployment_ttft_p95_seconds" in operator
    assert promtool.check_metrics(operator) == []
    assert promtool.check_metrics(httpx.get(fleet.door.metrics_url, timeout=10).text) == []
    real = promtool.check_metrics((ROOT / "tests/fixtures/vllm-0.32-cpu/metrics-t1.txt").read_text())
    for target in fleet.query('up{job="engines"}'):
        body = httpx.get(f"http://{target['metric']['instance']}/metrics", timeout=10).text
        assert promtool.check_metrics(body) == real


def test_every_dashboard_query_returns_series(fleet: Fleet) -> None:
    empty = []
    for board, title, expr in [*alerting.panel_queries(), *alerting.variable_queries()]:
        result = eventually(lambda: fleet.query(alerting.concrete(expr, RATE)) or _allowed(expr) or None,
                            timeout=20, what=f"{board} / {title}: {expr}")
        if isinstance(result, str):
            empty.append((title, result))
    print(f"\nallowed empty: {empty}")


def test_every_alert_expression_reads_series_that_are_scraped(fleet: Fleet) -> None:
    for rule in alerting.alerts(alerting.render_rules(binaries.find_binaries()["helm"])):
        for name in alerting.metric_names(rule["expr"]):
            if _allowed(name):
                continue
            assert fleet.query(f"count({{__name__={json.dumps(name)}}})"), f"{rule['alert']}: no {name} scraped"
        assert fleet.query(f"count({rule['expr']}) or vector(0)") is not None  # it evaluates


def test_an_unreachable_ttft_slo_fires_its_burn_alert(fleet: Fleet) -> None:
    def firing() -> set[str]:
        alerts = httpx.get(f"{fleet.prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return {a["labels"].get("model_name", "") for a in alerts
                if a["labels"]["alertname"] == "ShardwiseTTFTBudgetBurnFast" and a["state"] == "firing"}

    eventually(lambda: firing() >= set(MODELS), timeout=30, what="TTFT fast burn firing for every model")
    names = {a["labels"]["alertname"] for a in httpx.get(f"{fleet.prometheus}/api/v1/alerts").json()["data"]["alerts"]}
    assert not names & {"ShardwiseOperatorNotLeading", "ShardwiseNoReadyReplica", "ShardwiseGatewayErrors"}, names


def test_kubectl_get_infd_fits_120_columns(fleet: Fleet) -> None:
    out = fleet.kubectl.cluster.kubectl("get", "infd", "-A").stdout
    assert max(map(len, out.splitlines())) <= 120, out
    assert "LAYOUT" in out and "TP1xPP1" in out


class _Fields(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.row = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "data-deployment" in a:
            self.row = a["data-deployment"] or ""
        if "data-field" in a and "data-value" in a and self.row:
            self.rows.setdefault(self.row, {})[a["data-field"] or ""] = a["data-value"] or ""


def _chromium(*args: str) -> str:
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: run hack/install-deps.sh (Debian package `chromium`)"
    done = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _shown(status: dict[str, Any]) -> dict[str, str]:
    """What the console's row for a deployment must say, from its status."""
    fields = {"ttftP50Ms": "latency", "ttftP95Ms": "latency", "itlP50Ms": "latency", "itlP95Ms": "latency",
              "outputTokensPerSecond": "latency", "hourlyUSD": "cost", "perMillionOutputTokensUSD": "cost"}
    want = {f: _number(status[part][f]) for f, part in fields.items() if f in (status.get(part) or {})}
    want["readyReplicas"] = _number(status.get("readyReplicas", 0))
    want["phase"] = status.get("phase", "")
    plan = status.get("plan") or {}
    want["layout"] = f"TP{plan.get('tensorParallel')} x PP{plan.get('pipelineParallel')}"
    return want


def test_the_console_in_chromium_shows_the_status_numbers(fleet: Fleet) -> None:
    url = f"http://127.0.0.1:{fleet.door.http_port}/console"
    # With traffic flowing the observer rewrites the statuses every 2 s, faster than a busy machine renders
    # the page, and the gateway's informer lags the API by a watch event. So each row must equal the row
    # of one of the statuses read in the last few seconds (a page with any other number fails).
    recent: collections.deque[dict[str, dict[str, Any]]] = collections.deque(maxlen=6)

    def agree() -> dict[str, Any]:
        recent.append(fleet.statuses())
        parser = _Fields()
        parser.feed(_chromium("--dump-dom", url))
        recent.append(fleet.statuses())
        for key in recent[-1]:
            shown = parser.rows.get(key, {})
            candidates = [_shown(statuses[key]) for statuses in recent if key in statuses]
            if not any({k: shown.get(k) for k in want} == want for want in candidates):
                raise AssertionError(f"{key}: the console shows {shown}, the last statuses say {candidates[-1]}")
        return parser.rows

    rows = eventually(agree, timeout=120, interval=1, what="console numbers equal to the statuses")
    assert set(rows) == {f"{fleet.kubectl.namespace}/{m}" for m in MODELS}
    _chromium(f"--screenshot={SCREENSHOT}", "--window-size=1280,900", url)
    assert SCREENSHOT.stat().st_size > 10_000
