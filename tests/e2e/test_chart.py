"""The Helm chart installed into the real local control plane: its RBAC, impersonated.

One release per module, in its own namespace, with Pod Security "restricted" enforced there so
that pods exist only if the chart's hardening passes the API server's own check. The CRD is
already installed by the session (crds.install=false). The operator pod lands on a kwok node, so
no container runs: what runs is the real operator process on this machine, authenticated with a
token of the chart's ServiceAccount, which must reconcile without a single Forbidden.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process, free_port
from tests.e2e.support import ROOT, Kubectl, eventually

pytestmark = pytest.mark.e2e

CHART = ROOT / "charts" / "shardwise"
RELEASE = "sw"

# (verb, resource, namespace or "" for cluster-wide / all namespaces) the operator uses:
# kube/client.py, controller/cache.py (informers) and kube/leader.py. "ns" is any user namespace.
OPERATOR_ALLOWED = [
    ("list", "inferencedeployments.shardwise.io", ""),
    ("watch", "inferencedeployments.shardwise.io", ""),
    ("get", "inferencedeployments.shardwise.io", "ns"),
    ("patch", "inferencedeployments.shardwise.io/status", "ns"),
    ("list", "deployments.apps", ""),
    ("watch", "deployments.apps", ""),
    ("get", "deployments.apps", "ns"),
    ("create", "deployments.apps", "ns"),
    ("patch", "deployments.apps", "ns"),
    ("list", "services", ""),
    ("watch", "services", ""),
    ("get", "services", "ns"),
    ("create", "services", "ns"),
    ("patch", "services", "ns"),
    ("get", "leaderworkersets.leaderworkerset.x-k8s.io", "ns"),
    ("create", "leaderworkersets.leaderworkerset.x-k8s.io", "ns"),
    ("patch", "leaderworkersets.leaderworkerset.x-k8s.io", "ns"),
    ("list", "leaderworkersets.leaderworkerset.x-k8s.io", ""),
    ("watch", "leaderworkersets.leaderworkerset.x-k8s.io", ""),
    ("delete", "leaderworkersets.leaderworkerset.x-k8s.io", "ns"),
    ("delete", "deployments.apps", "ns"),  # the replaced workload after a re-plan, owned only
    # spec.routing's children (optional CRDs): watched, applied, deleted when routing goes.
    # With each pool, the body-based router's ConfigMap (render/routing.py).
    *((verb, resource, where) for resource in ("inferencepools.inference.networking.k8s.io",
                                               "httproutes.gateway.networking.k8s.io", "configmaps")
      for verb, where in (("list", ""), ("watch", ""), ("get", "ns"), ("create", "ns"), ("patch", "ns"),
                          ("delete", "ns"))),
    ("list", "nodes", ""),
    ("list", "pods", ""),
    ("list", "pods", "ns"),
    ("watch", "pods", "ns"),
    ("list", "horizontalpodautoscalers.autoscaling", "ns"),
    ("create", "events", "ns"),
    ("list", "events", "ns"),
    ("create", "persistentvolumeclaims", "ns"),  # the model cache
    ("patch", "persistentvolumeclaims", "ns"),
    ("delete", "persistentvolumeclaims", "ns"),
    ("list", "persistentvolumeclaims", ""),
    ("watch", "persistentvolumeclaims", ""),  # the model caches' informer
    ("create", "jobs.batch", "ns"),
    ("delete", "jobs.batch", "ns"),
    ("get", "storageclasses.storage.k8s.io", ""),
    ("get", "configmaps/shardwise-pricing", "release"),
    ("list", "configmaps/shardwise-pricing", "release"),  # its informer, by name
    ("watch", "configmaps/shardwise-pricing", "release"),
    ("watch", "nodes", ""),
    ("watch", "pods", ""),
    ("create", "leases.coordination.k8s.io", "release"),
    ("get", "leases.coordination.k8s.io/shardwise-operator", "release"),
    ("update", "leases.coordination.k8s.io/shardwise-operator", "release"),
    ("get", "configmaps/shardwise-corrections", "release"),
    ("list", "configmaps/shardwise-corrections", "release"),
    ("watch", "configmaps/shardwise-corrections", "release"),
    ("patch", "configmaps/shardwise-corrections", "release"),
    ("get", "configmaps/shardwise-autoscaling", "release"),
    ("list", "configmaps/shardwise-autoscaling", "release"),
    ("watch", "configmaps/shardwise-autoscaling", "release"),
    ("patch", "configmaps/shardwise-autoscaling", "release"),
]
OPERATOR_DENIED = [
    ("get", "secrets", ""),
    ("list", "secrets", ""),
    ("get", "secrets", "release"),
    ("list", "secrets", "ns"),
    ("delete", "nodes", ""),
    ("patch", "nodes", ""),
    ("update", "nodes", ""),
    ("patch", "inferencedeployments.shardwise.io", "ns"),  # spec belongs to the user
    ("delete", "inferencedeployments.shardwise.io", "ns"),
    ("delete", "services", "ns"),
    ("patch", "gateways.gateway.networking.k8s.io", "ns"),  # routing attaches to the user's Gateway, never edits it
    ("patch", "inferencepools.inference.networking.k8s.io/status", "ns"),  # the gateway's to write
    ("create", "pods", "ns"),
    ("create", "pods/exec", "ns"),
    ("create", "clusterroles.rbac.authorization.k8s.io", ""),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", ""),
    ("bind", "clusterroles.rbac.authorization.k8s.io", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", "ns"),
    ("delete", "namespaces", ""),
    ("impersonate", "serviceaccounts", ""),
    ("impersonate", "users", ""),
    ("create", "serviceaccounts/token", "release"),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("update", "leases.coordination.k8s.io/other", "release"),
    ("update", "leases.coordination.k8s.io/shardwise-operator", "ns"),
]
LABELER_ALLOWED = [("get", "nodes", ""), ("patch", "nodes", "")]
LABELER_DENIED = [("list", "nodes", ""), ("delete", "nodes", ""), ("get", "secrets", ""), ("list", "pods", ""),
                  ("update", "nodes", "")]


@dataclass(frozen=True)
class Release:
    namespace: str
    workload_namespace: str
    operator_sa: str
    labeler_sa: str


def helm(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(cluster.bins["helm"]), f"--kubeconfig={cluster.kubeconfig}", *args],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result


@pytest.fixture(scope="module")
def release(cluster: LocalCluster) -> Iterator[Release]:
    if "helm" not in cluster.bins:
        pytest.skip("hack/build-control-plane.sh did not produce helm")
    suffix = uuid.uuid4().hex[:6]
    namespace, workload_namespace, runtime_class = f"sw-{suffix}", f"sw-models-{suffix}", f"nvidia-{suffix}"
    for ns in (namespace, workload_namespace):
        cluster.kubectl("create", "namespace", ns)
        cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    # What the GPU Operator provides on a real cluster; a pod naming a missing one is rejected.
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
         "handler": "nvidia"}))
    try:
        helm(cluster, "install", RELEASE, str(CHART), "--namespace", namespace,
             "--set", "crds.install=false", "--set", "labeler.enabled=true",
             "--set", f"labeler.runtimeClassName={runtime_class}",
             "--set", "pricing.gpuHourUSD.NVIDIA-L40S=0.89")
        yield Release(namespace, workload_namespace, f"{RELEASE}-shardwise", f"{RELEASE}-shardwise-labeler")
    finally:
        subprocess.run([str(cluster.bins["helm"]), f"--kubeconfig={cluster.kubeconfig}", "uninstall", RELEASE,
                        "--namespace", namespace], capture_output=True, timeout=180)
        for ns in (namespace, workload_namespace):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "runtimeclass", runtime_class, "--wait=false", check=False)


def can_i(cluster: LocalCluster, release: Release, sa: str, verb: str, resource: str, where: str) -> bool:
    """One SubjectAccessReview, asked as the admin for the ServiceAccount.

    Not `kubectl auth can-i`: that resolves the resource through discovery first, so a kind whose
    CRD is not installed (InferencePool, HTTPRoute: optional) would read "no" whatever the RBAC says.
    """
    namespace = {"ns": release.workload_namespace, "release": release.namespace}.get(where)
    head, _, tail = resource.partition("/")
    plural, _, group = head.partition(".")
    attributes = {"verb": verb, "resource": plural, "group": group}
    if tail:
        attributes["name" if plural in ("configmaps", "leases") else "subresource"] = tail
    if namespace:
        attributes["namespace"] = namespace
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{release.namespace}:{sa}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}",
                                  "system:authenticated"],
                       "resourceAttributes": attributes}}
    result = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return bool(json.loads(result.stdout)["status"].get("allowed"))


def table(cluster: LocalCluster, release: Release, sa: str,
          checks: list[tuple[str, str, str]], expected: bool) -> list[str]:
    """The checks whose answer differs from `expected`, as readable lines."""
    return [f"{verb} {resource} in {where or 'all namespaces'}: {'denied' if expected else 'ALLOWED'}"
            for verb, resource, where in checks if can_i(cluster, release, sa, verb, resource, where) != expected]


def test_operator_may_make_every_call_it_makes(cluster: LocalCluster, release: Release) -> None:
    assert table(cluster, release, release.operator_sa, OPERATOR_ALLOWED, True) == []


def test_operator_may_not_read_secrets_write_nodes_or_escalate(cluster: LocalCluster, release: Release) -> None:
    assert table(cluster, release, release.operator_sa, OPERATOR_DENIED, False) == []


def test_labeler_may_only_get_and_patch_nodes(cluster: LocalCluster, release: Release) -> None:
    assert table(cluster, release, release.labeler_sa, LABELER_ALLOWED, True) == []
    assert table(cluster, release, release.labeler_sa, LABELER_DENIED, False) == []


def test_server_side_apply_that_creates_a_child_is_allowed(cluster: LocalCluster, release: Release) -> None:
    # can-i asks about one verb; an apply that creates needs patch and create, checked together here.
    child = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "probe", "namespace": release.workload_namespace},
             "spec": {"ports": [{"port": 8000}], "selector": {"app": "probe"}}}
    result = cluster.kubectl("apply", "--server-side", "--field-manager=shardwise", "--dry-run=server", "-f", "-",
                             f"--as=system:serviceaccount:{release.namespace}:{release.operator_sa}",
                             input=yaml.safe_dump(child), check=False)
    assert result.returncode == 0, result.stderr


def test_pods_pass_pod_security_restricted_and_labeler_covers_gpu_nodes(cluster: LocalCluster,
                                                                         release: Release) -> None:
    kubectl = Kubectl(cluster, release.namespace)
    gpu_nodes = kubectl.get("nodes", selector="nvidia.com/gpu.present=true")["items"]
    assert gpu_nodes, "the session topology has no GPU nodes"

    def pods(component: str) -> list[dict]:
        return kubectl.get("pods", selector=f"app.kubernetes.io/component={component}")["items"]

    # The namespace enforces "restricted": a pod that violates it is never created at all.
    eventually(lambda: len(pods("operator")) == 1, timeout=60, what="the operator pod to be admitted")
    # Scheduled, one per GPU node (a DaemonSet pod has no nodeName until the scheduler binds it).
    wanted = {n["metadata"]["name"] for n in gpu_nodes}
    eventually(lambda: sorted(p["spec"].get("nodeName", "") for p in pods("labeler")) == sorted(wanted), timeout=90,
               what=f"one labeler pod on each GPU node ({len(gpu_nodes)})")


def service_account_kubeconfig(cluster: LocalCluster, release: Release, path: pathlib.Path) -> pathlib.Path:
    token = cluster.kubectl("create", "token", release.operator_sa, "--namespace", release.namespace,
                            "--duration=1h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:  # same server and CA, only the credentials change
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def test_real_operator_reconciles_as_the_service_account(cluster: LocalCluster, release: Release,
                                                         tmp_path: pathlib.Path) -> None:
    kubeconfig = service_account_kubeconfig(cluster, release, tmp_path / "kubeconfig")
    log = cluster.log_dir / f"operator-as-sa-{release.namespace}.log"
    argv = [sys.executable, "-m", "shardwise.cli", "run", "--resync-seconds", "2",
            "--health-port", str(free_port()), "--metrics-port", str(free_port())]
    process = Process("operator-as-sa", argv, log, env={"KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
                                                        "POD_NAMESPACE": release.namespace})
    kubectl = Kubectl(cluster, release.workload_namespace)
    process.start()
    try:
        infd = yaml.safe_load((ROOT / "examples" / "llama-8b.yaml").read_text())
        infd["metadata"]["namespace"] = release.workload_namespace
        kubectl.apply_yaml(json.dumps(infd))
        eventually(lambda: (kubectl.condition("llama-8b", "Planned") or {}).get("status") == "True",
                   timeout=60, what="the operator, as its ServiceAccount, to plan llama-8b")
        eventually(lambda: kubectl.get("deployment", "llama-8b") and kubectl.get("service", "llama-8b"),
                   timeout=60, what="the children of llama-8b")
        eventually(lambda: kubectl.get("events")["items"], timeout=30, what="an event about llama-8b")
        assert process.alive(), process.log_tail()
    finally:
        process.stop()
    text = log.read_text(errors="replace")
    # Each line without its timestamp: "19:07:27,403" is not an HTTP 403.
    messages = [line.split(" ", 2)[-1] for line in text.splitlines()]
    denied = [line for line in messages if "Forbidden" in line or "403" in line
              or "Not enough permissions" in line]
    assert denied == [], "\n".join(denied)
