"""`make bench-scale`: the operator at scale on the real local control plane.

Profile "converge" (N = 100 and 500 InferenceDeployments in 10 namespaces, 140 simulated 8-GPU
nodes, a fresh cluster each): time from the start of the apply to all children, all pods ready
and all Ready; reconciles, status writes and all writes per resource while converging; then one
idle minute: API requests and writes per minute, operator CPU and RSS.

Profile "big" (5,000 nodes, 50,000 pods, most of them not GPU pods; nothing runs them: the
controller manager, scheduler and kwok are stopped so only the API server works): the operator's
time from process start to synced caches, its resident and peak memory.

The simulated pods serve no /metrics, so the observer's scrape interval is set to an hour by
default: these figures are the control loop's, not the scraper's (bench_collector.py measures
that). `--metrics-interval 15` runs the observer as it runs by default, scraping pods that do not
answer: its writes and Warning events then count too.
Nothing here is asserted; it prints figures to compare with the targets of issue 11.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardwise.devcluster.cluster import LocalCluster  # noqa: E402
from shardwise.devcluster.processes import Process, free_port  # noqa: E402
from shardwise.devcluster.scrape import operator_metrics  # noqa: E402

OPERATOR_USER = "shardwise-operator"
CRD = ROOT / "crds/inferencedeployments.shardwise.io.yaml"
LABEL = "shardwise.io/inference-deployment"
NAMESPACES = [f"scale-{i}" for i in range(10)]


class Api:
    """Plain HTTPS to the API server as the admin: the benchmark's own reads cost little."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.server, self.token = cluster.server, cluster.token
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json", "Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=120, context=self.context) as response:
            return json.loads(response.read())

    def stream(self, path: str) -> Any:
        """The events of a watch, one parsed line at a time."""
        request = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=700, context=self.context) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)


class Operator:
    def __init__(self, cluster: LocalCluster, log: pathlib.Path, metrics_interval_s: float = 3600) -> None:
        self.metrics_port = free_port()
        argv = [sys.executable, "-m", "shardwise.cli", "run", "--health-port", str(free_port()),
                "--metrics-port", str(self.metrics_port)]
        self.process = Process("operator", argv, log, env={
            "KUBECONFIG": str(cluster.user_kubeconfig(OPERATOR_USER)), "PYTHONUNBUFFERED": "1",
            "POD_NAME": "bench-operator", "SHARDWISE_METRICS_INTERVAL_SECONDS": str(metrics_interval_s)})

    def start(self) -> "Operator":
        self.started = time.monotonic()
        self.process.start()
        return self

    def metrics(self) -> dict[str, float]:
        return operator_metrics(self.metrics_port)

    def proc(self) -> dict[str, float]:
        pid = self.process.popen.pid  # type: ignore[union-attr]
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        status = dict(line.split(":", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return {"cpu_s": (int(fields[11]) + int(fields[12])) / ticks,
                "rss_mib": int(status["VmRSS"].split()[0]) / 1024, "hwm_mib": int(status["VmHWM"].split()[0]) / 1024}

    def wait(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise RuntimeError(f"operator exited while waiting for {what}:\n{self.process.log_tail()}")
            if predicate(self.metrics()):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what}:\n{self.process.log_tail()}")

    def stop(self) -> None:
        self.process.stop()


def triggers(metrics: dict[str, float]) -> dict[str, float]:
    prefix = 'shardwise_reconcile_triggers_total{source="'
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix)}


def requests_by_method(metrics: dict[str, float]) -> dict[str, float]:
    prefix = 'shardwise_api_requests_total{verb="'
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix)}


def audit_writes(cluster: LocalCluster) -> list[dict[str, Any]]:
    out = []
    with cluster.audit_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            if event.get("user", {}).get("username") == OPERATOR_USER and event.get("stage") == "ResponseComplete" \
                    and event.get("verb") in ("create", "update", "patch", "delete"):
                out.append(event)
    return out


def topology_file(work: pathlib.Path, nodes: int) -> pathlib.Path:
    groups = [{"namePrefix": "h100-", "count": nodes // 2,
               "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8, "memoryMiB": 81559, "family": "hopper"},
               "topology": {"interconnect": "nvswitch", "nvlinkDomainSize": 8, "nvlinkBandwidthGBps": 900}},
              {"namePrefix": "l40s-", "count": nodes - nodes // 2,
               "gpu": {"product": "NVIDIA-L40S", "count": 8, "memoryMiB": 46068, "family": "ada-lovelace"},
               "topology": {"interconnect": "pcie", "nvlinkDomainSize": 1}}]
    path = work / "topology.yaml"
    path.write_text(yaml.safe_dump({"nodeGroups": groups}))
    return path


def manifest(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
                     "serving": {"maxModelLen": 2048, "maxConcurrency": 8},
                     "parallelism": {"objective": "Cost"}, "replicas": 1}}


class Watch:
    """First times seen, relative to `start`: each child Deployment, each pod Ready, each Ready."""

    def __init__(self, api: Api) -> None:
        self.api, self.start = api, time.monotonic()
        self.children: dict[str, float] = {}
        self.first_pod_ready: dict[str, float] = {}
        self.first_ready: dict[str, float] = {}
        self._stop = False
        self._lock = threading.Lock()
        for path, handle in ((f"/apis/apps/v1/deployments?labelSelector={LABEL}", self._deployment),
                             (f"/api/v1/pods?labelSelector={LABEL}", self._pod),
                             ("/apis/shardwise.io/v1alpha1/inferencedeployments", self._infd)):
            threading.Thread(target=self._run, args=(path, handle), daemon=True).start()

    def stop(self) -> None:
        self._stop = True

    def _now(self) -> float:
        return time.monotonic() - self.start

    def _deployment(self, obj: dict[str, Any]) -> None:
        self.children.setdefault(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", self._now())

    def _pod(self, obj: dict[str, Any]) -> None:
        if any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or []):
            owner = f"{obj['metadata']['namespace']}/{obj['metadata']['labels'][LABEL]}"
            self.first_pod_ready.setdefault(owner, self._now())

    def _infd(self, obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase") == "Ready":
            self.first_ready.setdefault(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", self._now())

    def _run(self, path: str, handle: Any) -> None:
        rv = ""
        while not self._stop:
            if not rv:
                listed = self.api.call("GET", path)
                rv = listed["metadata"]["resourceVersion"]
                for obj in listed.get("items") or []:
                    with self._lock:
                        handle(obj)
            try:
                for event in self.api.stream(f"{path}{'&' if '?' in path else '?'}watch=true&resourceVersion={rv}"
                                             "&allowWatchBookmarks=true&timeoutSeconds=600"):
                    if self._stop:
                        return
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        rv = ""  # expired: list again
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        with self._lock:
                            handle(obj)
            except OSError:
                time.sleep(0.5)

    @staticmethod
    def _all(seen: dict[str, float], n: int) -> float | None:
        return max(seen.values()) if len(seen) >= n else None

    def time_all_children(self, n: int) -> float | None:
        return self._all(self.children, n)

    def time_all_pods_ready(self, n: int) -> float | None:
        return self._all(self.first_pod_ready, n)

    def time_all_ready(self, n: int) -> float | None:
        return self._all(self.first_ready, n)


def wait_for_settled_nodes(api: Api, timeout: float = 300.0) -> None:
    """The deployments go onto an existing cluster: wait until the node controller has labelled the
    new nodes and lifted their not-ready taints (about 9 nodes a second on this machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = api.call("GET", "/api/v1/nodes")["items"]
        if all("beta.kubernetes.io/os" in n["metadata"].get("labels", {}) and not n["spec"].get("taints")
               for n in nodes):
            return
        time.sleep(2.0)
    raise TimeoutError("nodes did not settle")


def converge(n: int, nodes: int, controller_manager_qps: int, metrics_interval_s: float) -> dict[str, Any]:
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"shardwise-scale-{n}-"))
    cluster = LocalCluster(work, controller_manager_qps=controller_manager_qps)
    operator = None
    try:
        cluster.start()
        cluster.add_nodes(topology_file(work, nodes))
        cluster.install_crd(CRD)
        for ns in NAMESPACES:
            cluster.kubectl("create", "namespace", ns)
        api = Api(cluster)
        wait_for_settled_nodes(api)
        operator = Operator(cluster, cluster.log_dir / "operator.log", metrics_interval_s).start()
        operator.wait(lambda m: m.get("shardwise_leader") == 1, 120, "operator leading")

        docs = [manifest(f"m-{i:04d}", NAMESPACES[i % len(NAMESPACES)]) for i in range(n)]
        path = work / "infds.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        watch = Watch(api)
        start = watch.start = time.monotonic()
        cluster.kubectl("create", "-f", str(path))
        applied = time.monotonic() - start

        # Watches, not polling: listing every pod and InferenceDeployment each second would cost
        # the API server more than the operator does (a user watches with `kubectl get -w`).
        while watch.time_all_ready(n) is None or watch.time_all_pods_ready(n) is None:
            if time.monotonic() - start > 900:
                raise TimeoutError(f"not converged in 900 s: {len(watch.first_ready)} Ready, "
                                   f"{len(watch.first_pod_ready)} pods")
            time.sleep(1.0)
        t_children, t_pods, t_ready = watch.time_all_children(n), watch.time_all_pods_ready(n), watch.time_all_ready(n)
        first_ready, first_pod_ready = watch.first_ready, watch.first_pod_ready
        watch.stop()
        lag = sorted(first_ready[k] - first_pod_ready.get(k, first_ready[k]) for k in first_ready)

        operator.wait(lambda m: m.get("shardwise_workqueue_depth") == 0, 120, "queue drained")
        m = operator.metrics()
        writes = audit_writes(cluster)
        status_writes = [w for w in writes if w["objectRef"].get("resource") == "inferencedeployments"
                         and w["objectRef"].get("subresource") == "status"]
        events = [w for w in writes if w["objectRef"].get("resource") == "events"]
        converging = {"reconciles": m.get("shardwise_reconciles_total", 0),
                      "status_writes": len(status_writes), "events": len(events),
                      "writes": len([w for w in writes if w["objectRef"].get("resource") != "leases"]),
                      "requests": requests_by_method(m), "triggers": triggers(m)}

        time.sleep(15.0)  # let the last events settle before the idle minute
        before_m, before_p, before_w = operator.metrics(), operator.proc(), audit_writes(cluster)
        time.sleep(60.0)
        after_m, after_p, after_w = operator.metrics(), operator.proc(), audit_writes(cluster)
        idle_requests = {k: v - requests_by_method(before_m).get(k, 0) for k, v in requests_by_method(after_m).items()}
        new_writes = after_w[len(before_w):]
        return {
            "n": n, "nodes": nodes, "controller_manager_qps": controller_manager_qps,
            "metrics_interval_s": metrics_interval_s, "apply_s": round(applied, 1),
            "all_ready_after_apply_s": round(t_ready - applied, 1),
            "all_children_s": round(t_children or 0, 1), "all_pods_ready_s": round(t_pods, 1),
            "all_ready_s": round(t_ready, 1),
            "ready_after_pod_s_p50_max": [round(lag[len(lag) // 2], 1), round(lag[-1], 1)],
            "reconciles_per_resource": round(converging["reconciles"] / n, 2),
            "status_writes_per_resource": round(converging["status_writes"] / n, 2),
            "events_per_resource": round(converging["events"] / n, 2),
            "writes_per_resource": round(converging["writes"] / n, 2),
            "converging_requests": converging["requests"],
            "converging_triggers": converging["triggers"],
            "idle_requests_per_min_excl_watch": round(sum(v for k, v in idle_requests.items() if k != "WATCH"), 1),
            "idle_requests_by_method": idle_requests,
            "idle_writes_per_min": len([w for w in new_writes if w["objectRef"].get("resource") != "leases"]),
            "idle_lease_renewals_per_min": len([w for w in new_writes if w["objectRef"].get("resource") == "leases"]),
            "idle_cpu_pct_of_one_core": round(100 * (after_p["cpu_s"] - before_p["cpu_s"]) / 60.0, 2),
            "idle_rss_mib": round(after_p["rss_mib"], 1), "peak_rss_mib": round(after_p["hwm_mib"], 1),
        }
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()


def pod(i: int, node: str, gpu: bool) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1", "cpu": "1"}} if gpu \
        else {"requests": {"cpu": "100m", "memory": "128Mi"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i:05d}", "labels": {"app": f"app-{i % 500}", "tier": "batch", "team": f"t{i % 40}"},
                         "annotations": {"example.com/owner": "someone@example.com"}},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "registry.example.com/team/app:1.2.3", "args": ["--port=8080", "--verbose"],
                "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(5)],
                "ports": [{"containerPort": 8080, "name": "http"}], "resources": resources}]}}


def big(nodes: int, pods: int, gpu_nodes: int, gpu_pods: int) -> dict[str, Any]:
    work = pathlib.Path(tempfile.mkdtemp(prefix="shardwise-scale-big-"))
    cluster = LocalCluster(work)
    operator = None
    try:
        cluster.start()
        for process in list(cluster.processes):  # nothing should run these pods: only the API server works
            if process.name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                process.stop()
        cluster.install_crd(CRD)
        api = Api(cluster)
        for ns in ("big-0", "big-1", "big-2", "big-3"):
            api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            # The controller manager that would create it is stopped; pod admission needs it.
            api.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        gpu = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
               "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"}
        ready = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]

        def node(i: int) -> dict[str, Any]:
            is_gpu = i < gpu_nodes
            alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", **({"nvidia.com/gpu": "8"} if is_gpu else {})}
            return {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": f"n-{i:05d}", "labels": {"kubernetes.io/hostname": f"n-{i:05d}",
                                                                   **(gpu if is_gpu else {})}},
                    "status": {"capacity": alloc, "allocatable": alloc, "conditions": ready}}

        created = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: api.call("POST", "/api/v1/nodes", node(i)), range(nodes)))
            every = max(1, pods // gpu_pods)

            def create_pod(i: int) -> None:
                is_gpu = i % every == 0 and i // every < gpu_pods
                target = f"n-{(i // every) % gpu_nodes:05d}" if is_gpu else f"n-{gpu_nodes + i % (nodes - gpu_nodes):05d}"
                api.call("POST", f"/api/v1/namespaces/big-{i % 4}/pods", pod(i, target, is_gpu))

            list(pool.map(create_pod, range(pods)))
        created_s = time.monotonic() - created

        operator = Operator(cluster, cluster.log_dir / "operator.log", metrics_interval_s).start()
        operator.wait(lambda m: m.get("shardwise_caches_synced") == 1, 600, "caches synced")
        synced_s = time.monotonic() - operator.started
        time.sleep(10.0)
        p = operator.proc()
        return {"nodes": nodes, "pods": pods, "gpu_nodes": gpu_nodes, "gpu_pods": gpu_pods,
                "objects_created_s": round(created_s, 1), "start_to_synced_s": round(synced_s, 1),
                "rss_mib": round(p["rss_mib"], 1), "peak_rss_mib": round(p["hwm_mib"], 1),
                "synced_log": next((line for line in operator.process.log_path.read_text().splitlines()
                                    if "caches synced" in line), "")}
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,500")
    parser.add_argument("--gpu-nodes", type=int, default=140)
    parser.add_argument("--controller-manager-qps", type=int, default=100,
                        help="the controller manager's client limit (upstream's default is 20)")
    parser.add_argument("--metrics-interval", type=float, default=3600,
                        help="the observer's scrape interval (the operator's default is 15 s)")
    parser.add_argument("--big", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--big-nodes", type=int, default=5000)
    parser.add_argument("--big-pods", type=int, default=50000)
    args = parser.parse_args()
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the clusters and the operator stop too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"machine: {os.cpu_count()} cores, "
          f"{int(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        print(json.dumps({"profile": "converge", **converge(n, args.gpu_nodes, args.controller_manager_qps, args.metrics_interval)}), flush=True)
    if args.big:
        print(json.dumps({"profile": "big", **big(args.big_nodes, args.big_pods, gpu_nodes=500,
                                                  gpu_pods=args.big_pods // 10)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
