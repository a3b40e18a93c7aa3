"""The Helm chart, rendered and linted by the real helm: defaults, hardening, RBAC, schema."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from chart_support import CHART, ROOT, find, run_helm
from conftest import Render

from shardwise.controller import calibration
from shardwise.controller.settings import Settings

CRD_NAME = "inferencedeployments.shardwise.io.yaml"


def rules_of(objects: list[dict[str, Any]], kind: str, name: str) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs of one ClusterRole or Role."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in find(objects, kind, name)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def test_packaged_crd_is_byte_identical_to_crds_folder() -> None:
    # `shardwise crds` regenerates crds/; the chart must ship exactly that file.
    assert (CHART / "files" / CRD_NAME).read_bytes() == (ROOT / "crds" / CRD_NAME).read_bytes()


@pytest.mark.parametrize("sets", [(), ("labeler.enabled=true", "operator.watchNamespaces={a,b}"),
                                  ("gateway.enabled=true", "gateway.replicas=3")])
def test_lint_is_clean(helm: pathlib.Path, sets: tuple[str, ...]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    result = run_helm(helm, "lint", "--strict", str(CHART), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_default_render_kinds(render: Render) -> None:
    kinds = sorted(o["kind"] for o in render())
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "ConfigMap", "CustomResourceDefinition",
                     "Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"]


def test_rendered_crd_is_the_generated_crd_kept_on_uninstall(render: Render) -> None:
    crd = find(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    generated = yaml.safe_load((ROOT / "crds" / CRD_NAME).read_text())
    assert crd["spec"] == generated["spec"] and crd["metadata"]["name"] == generated["metadata"]["name"]
    assert "annotations" not in find(render("crds.keep=false"), "CustomResourceDefinition")["metadata"]
    assert not [o for o in render("crds.install=false") if o["kind"] == "CustomResourceDefinition"]


def test_operator_deployment_is_hardened_and_elects_a_leader(render: Render) -> None:
    deployment = find(render(), "Deployment", "rel-shardwise")
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert pod["serviceAccountName"] == "rel-shardwise"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(deployment)
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in c["env"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert "--health-port=8081" in c["args"] and "--metrics-port=8080" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "--lease-duration-seconds=15" in c["args"] and "--api-unreachable-seconds=60" in c["args"]
    assert not [o for o in render() if o["kind"] == "PodDisruptionBudget"]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    assert c["image"] == "shardwise/operator:0.1.0"


def test_two_replicas_get_a_disruption_budget_and_may_use_their_lease(render: Render) -> None:
    objects = render("operator.replicas=2")
    assert find(objects, "Deployment", "rel-shardwise")["spec"]["replicas"] == 2
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == find(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not [o for o in render("operator.replicas=2", "operator.podDisruptionBudget.enabled=false")
                if o["kind"] == "PodDisruptionBudget"]
    role = find(objects, "Role", "rel-shardwise")["rules"]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["shardwise-operator"], "verbs": ["get", "update"]} in role


def test_image_digest_wins_over_tag(render: Render) -> None:
    digest = "sha256:" + "a" * 64
    c = container(find(render(f"operator.image.digest={digest}", "operator.image.tag=v9"), "Deployment"))
    assert c["image"] == f"shardwise/operator@{digest}"


def test_watch_namespaces_become_flags(render: Render) -> None:
    objects = render("operator.watchNamespaces={ml,research}")
    args = container(find(objects, "Deployment"))["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=ml", "--namespace=research"]
    assert ("", "namespaces") not in rules_of(objects, "ClusterRole", "rel-shardwise")


def test_operator_rbac_reads_no_secrets_and_never_writes_nodes(render: Render) -> None:
    objects = render()
    rules = rules_of(objects, "ClusterRole", "rel-shardwise")
    assert not any(resource in ("secrets", "*") or group == "*" for group, resource in rules)
    assert not any("*" in verbs or {"escalate", "bind", "impersonate"} & verbs for verbs in rules.values())
    assert rules[("", "nodes")] == {"get", "list", "watch"}
    for child in (("apps", "deployments"), ("", "services"), ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                  ("inference.networking.k8s.io", "inferencepools"), ("gateway.networking.k8s.io", "httproutes")):
        assert {"get", "create", "patch"} <= rules[child], child  # server-side apply that may create
    for routing in (("inference.networking.k8s.io", "inferencepools"), ("gateway.networking.k8s.io", "httproutes")):
        assert rules[routing] == {"get", "list", "watch", "create", "patch", "delete"}, routing
    assert not any(group == "gateway.networking.k8s.io" and resource != "httproutes" for group, resource in rules)
    assert rules[("shardwise.io", "inferencedeployments")] == {"get", "list", "watch"}
    assert rules[("shardwise.io", "inferencedeployments/status")] == {"patch"}
    role = find(objects, "Role", "rel-shardwise")
    assert role["metadata"]["namespace"] == "sw-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": [Settings().pricing_configmap], "verbs": ["get", "list", "watch"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": ["shardwise-operator"], "verbs": ["get", "update"]},
                             {"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["shardwise-corrections", "shardwise-autoscaling"], "verbs": ["get", "list", "watch", "patch"]}]
    binding = find(objects, "ClusterRoleBinding", "rel-shardwise")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-shardwise", "namespace": "sw-system"}]


def test_pricing_configmap_is_where_the_operator_reads_it(render: Render) -> None:
    cm = find(render("pricing.gpuHourUSD.NVIDIA-L40S=0.89", "pricing.gpuHourUSD.NVIDIA-H100-80GB-HBM3=2.49"),
              "ConfigMap", Settings().pricing_configmap)
    assert cm["data"] == {"NVIDIA-L40S": "0.89", "NVIDIA-H100-80GB-HBM3": "2.49"}
    assert find(render(), "ConfigMap", Settings().pricing_configmap)["data"] == {}


def test_corrections_configmap_is_created_empty_and_kept(render: Render) -> None:
    cm = find(render(), "ConfigMap", calibration.CONFIGMAP)
    assert "data" not in cm  # never templated: a helm upgrade must not erase what was learned
    assert cm["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_labeler_is_off_by_default_and_may_only_get_and_patch_nodes(render: Render) -> None:
    assert not [o for o in render() if o["kind"] == "DaemonSet"]
    objects = render("labeler.enabled=true")
    daemonset = find(objects, "DaemonSet", "rel-shardwise-labeler")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["serviceAccountName"] == "rel-shardwise-labeler"
    c = container(daemonset)
    assert c["command"] == ["shardwise-labeler"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})  # must not take GPUs from models
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert rules_of(objects, "ClusterRole", "rel-shardwise-labeler") == {("", "nodes"): {"get", "patch"}}
    assert "runtimeClassName" not in find(render("labeler.enabled=true", "labeler.runtimeClassName="),
                                          "DaemonSet")["spec"]["template"]["spec"]


def test_monitors_render_only_where_prometheus_operator_exists(helm: pathlib.Path, render: Render) -> None:
    sets = ("metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true")
    objects = render(*sets, flags=("--api-versions", "monitoring.coreos.com/v1"))
    service_monitor, pod_monitor = find(objects, "ServiceMonitor"), find(objects, "PodMonitor")
    selector = find(objects, "Service", "rel-shardwise-metrics")["spec"]["selector"]
    assert service_monitor["spec"]["selector"]["matchLabels"] == selector
    assert service_monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert not [o for o in render() if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    result = run_helm(helm, "template", "rel", str(CHART),
                      "--set", "metrics.serviceMonitor.enabled=true")
    assert result.returncode != 0 and "monitoring.coreos.com/v1" in result.stderr


@pytest.mark.parametrize("bad", [
    "operator.metricsPort=70000",
    "operator.replicas=0",
    "operator.leaderElection.leaseDurationSeconds=0",
    "pricing.gpuHourUSD.NVIDIA-L40S=cheap",
    "labeler.runtimeClassName=Not_A_Name",
    "operator.image.digest=latest",
    "operator.image.pullPolicy=Sometimes",
    "metrics.serviceMonitor.interval=often",
    "operator.watchNamespaces={UPPER}",
])
def test_schema_rejects_bad_values(helm: pathlib.Path, bad: str) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--set", bad)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr


# -- the gateway ---------------------------------------------------------------------------------

def test_the_gateway_is_off_by_default_and_one_value_turns_it_on(render: Render) -> None:
    assert not [o for o in render() if "gateway" in o["metadata"]["name"]]
    objects = render("gateway.enabled=true")
    deployment = find(objects, "Deployment", "rel-shardwise-gateway")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["envoy", "gateway"]
    assert pod["containers"][0]["image"] == "envoyproxy/envoy:v1.40.0"  # the official image
    assert pod["containers"][1]["command"] == ["shardwise", "gateway", "serve"]
    assert "--grpc-host=127.0.0.1" in pod["containers"][1]["args"]  # ext_proc never leaves the pod
    service = find(objects, "Service", "rel-shardwise-gateway")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"http": "http", "console": "console"}
    assert find(objects, "PodDisruptionBudget", "rel-shardwise-gateway")["spec"]["minAvailable"] == 1
    assert not [o for o in render("gateway.enabled=true", "gateway.replicas=1") if o["kind"] == "PodDisruptionBudget"
                and "gateway" in o["metadata"]["name"]]


def test_the_gateway_may_read_models_and_pods_and_only_patch_a_model(render: Render) -> None:
    rules = rules_of(render("gateway.enabled=true"), "ClusterRole", "rel-shardwise-gateway")
    assert rules == {("shardwise.io", "inferencedeployments"): {"get", "list", "watch", "patch"},
                     ("", "pods"): {"get", "list", "watch"}}


def test_the_charts_envoy_config_command_is_one_the_gateway_cli_accepts(render: Render, tmp_path: pathlib.Path) -> None:
    import json
    import shlex
    import subprocess
    import sys

    pod = find(render("gateway.enabled=true", "gateway.port=8443", "gateway.hold.timeoutSeconds=900"),
               "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    line = init["args"][0]
    command, _, target = line.partition(">")
    assert target.strip() == "/etc/envoy/envoy.json"
    argv = shlex.split(command)
    assert argv[:3] == ["shardwise", "gateway", "envoy-config"]
    result = subprocess.run([sys.executable, "-m", "shardwise.cli", *argv[1:]], capture_output=True, text=True,
                            check=True)
    bootstrap = json.loads(result.stdout)
    listener = bootstrap["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert (listener["address"], listener["port_value"]) == ("0.0.0.0", 8443)
    envoy = pod["containers"][0]
    assert envoy["ports"][0]["containerPort"] == 8443 and "/etc/envoy/envoy.json" in envoy["args"]


def test_engine_pods_take_traffic_only_from_the_gateway_and_the_operator(render: Render) -> None:
    objects = render("gateway.enabled=true", "operator.watchNamespaces={ml,team-a}")
    policies = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-engines")]
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["ml", "team-a"]
    sources = policies[0]["spec"]["ingress"][0]["from"]
    components = next(e for e in sources[0]["podSelector"]["matchExpressions"]
                      if e["key"] == "app.kubernetes.io/component")
    assert sorted(components["values"]) == ["gateway", "operator"]
    assert policies[0]["spec"]["podSelector"]["matchExpressions"][0]["key"] == "shardwise.io/inference-deployment"
    assert not [o for o in render("gateway.enabled=true", "gateway.networkPolicy.enabled=false")
                if o["kind"] == "NetworkPolicy"]


def test_per_key_usage_is_on_a_port_only_prometheus_reaches(render: Render) -> None:
    objects = render("gateway.enabled=true", "metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
                     flags=("--api-versions", "monitoring.coreos.com/v1"))
    pod = find(objects, "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]
    gateway = pod["containers"][1]
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert f"--http-port={ports['console']}" in gateway["args"] and f"--metrics-port={ports['metrics']}" in gateway["args"]
    assert gateway["readinessProbe"]["httpGet"]["port"] == "console"
    # Clients' Service: no metrics port. Prometheus finds the pods through a Service of its own.
    client = find(objects, "Service", "rel-shardwise-gateway")
    assert "metrics" not in {p["name"] for p in client["spec"]["ports"]}
    scrape = find(objects, "Service", "rel-shardwise-gateway-metrics")
    assert [p["targetPort"] for p in scrape["spec"]["ports"]] == ["metrics"]
    monitor = find(objects, "ServiceMonitor", "rel-shardwise-gateway")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= scrape["metadata"]["labels"].items()
    assert not selector.items() <= client["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert find(objects, "PodMonitor", "rel-shardwise-gateway")["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    # The gateway's own NetworkPolicy: OpenAI and console ports from anywhere, metrics from Prometheus only.
    policy = find(objects, "NetworkPolicy", "rel-shardwise-gateway")
    assert policy["metadata"]["namespace"] == find(objects, "Deployment", "rel-shardwise-gateway")["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels(objects).items()
    open_rule, metrics_rule = policy["spec"]["ingress"]
    assert "from" not in open_rule and {p["port"] for p in open_rule["ports"]} == {"http", "console"}
    assert [p["port"] for p in metrics_rule["ports"]] == ["metrics"]
    assert metrics_rule["from"] == [{"namespaceSelector": {},
                                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    peers = render("gateway.enabled=true", "gateway.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=obs")
    rule = find(peers, "NetworkPolicy", "rel-shardwise-gateway")["spec"]["ingress"][1]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]


def pod_labels(objects: list) -> dict:
    return find(objects, "Deployment", "rel-shardwise-gateway")["spec"]["template"]["metadata"]["labels"]


def test_gateway_auth_reads_keys_writes_their_status_and_elects_one_writer(render: Render) -> None:
    assert not [o for o in render("gateway.enabled=true") if o["kind"] == "CustomResourceDefinition"
                and o["metadata"]["name"] == "apikeys.shardwise.io"]
    objects = render("gateway.enabled=true", "gateway.auth.enabled=true", "gateway.redis.url=redis://redis:6379/0")
    rules = rules_of(objects, "ClusterRole", "rel-shardwise-gateway")
    assert rules[("shardwise.io", "apikeys")] == {"get", "list", "watch"}
    assert rules[("shardwise.io", "apikeys/status")] == {"patch"}
    assert rules[("", "secrets")] == {"list", "watch"}  # never get: only the labelled ones, watched
    role = find(objects, "Role", "rel-shardwise-gateway-keys")
    assert any(r.get("resourceNames") == ["shardwise-gateway-keys"] for r in role["rules"])
    crd = find(objects, "CustomResourceDefinition", "apikeys.shardwise.io")
    assert crd["spec"]["names"]["kind"] == "APIKey"
    args = find(objects, "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]["containers"][1]["args"]
    assert "--auth" in args and "--redis-url=redis://redis:6379/0" in args
    assert "--quota-fallback-share=2" in args and "--auth-anonymous" not in args


def test_gateway_auth_values_are_checked(render: Render) -> None:
    with pytest.raises(Exception):
        render("gateway.enabled=true", "gateway.auth.enabled=true", "gateway.auth.unknown=1")
    with pytest.raises(Exception):
        render("gateway.enabled=true", "gateway.redis.url=http://not-redis")


def test_the_chart_carries_the_apikey_crd_byte_for_byte() -> None:
    root = pathlib.Path(__file__).resolve().parents[3]
    assert (root / "crds/apikeys.shardwise.io.yaml").read_text() == \
        (root / "charts/shardwise/files/apikeys.shardwise.io.yaml").read_text()


def test_gateway_providers_read_providers_write_their_status_and_turn_on_envoys_cds(render: Render,
                                                                                    tmp_path: pathlib.Path) -> None:
    import json
    import shlex
    import subprocess
    import sys

    assert not [o for o in render("gateway.enabled=true") if o["kind"] == "CustomResourceDefinition"
                and o["metadata"]["name"] == "providers.shardwise.io"]
    objects = render("gateway.enabled=true", "gateway.providers.enabled=true")
    rules = rules_of(objects, "ClusterRole", "rel-shardwise-gateway")
    assert rules[("shardwise.io", "providers")] == {"get", "list", "watch"}
    assert rules[("shardwise.io", "providers/status")] == {"patch"}
    assert rules[("", "secrets")] == {"list", "watch"} and rules[("", "events")] == {"create"}
    assert find(objects, "CustomResourceDefinition", "providers.shardwise.io")["spec"]["names"]["kind"] == "Provider"
    pod = find(objects, "Deployment", "rel-shardwise-gateway")["spec"]["template"]["spec"]
    args = pod["containers"][1]["args"]
    assert "--providers" in args and "--provider-probe-interval=30" in args
    command = shlex.split(pod["initContainers"][0]["args"][0].partition(">")[0])
    bootstrap = json.loads(subprocess.run([sys.executable, "-m", "shardwise.cli", *command[1:]], capture_output=True,
                                          text=True, check=True).stdout)
    assert "cds_config" in bootstrap["dynamic_resources"]
    root = pathlib.Path(__file__).resolve().parents[3]
    assert (root / "crds/providers.shardwise.io.yaml").read_text() == \
        (root / "charts/shardwise/files/providers.shardwise.io.yaml").read_text()
