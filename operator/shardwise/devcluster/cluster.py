"""LocalCluster: etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback.

Authentication is a static admin token (group system:masters); authorization is Node,RBAC, so the
Helm chart's RBAC can be checked by impersonating its ServiceAccount. kwok plays the kubelet of
every node annotated `kwok.x-k8s.io/node: fake` and gives pods IPs in a loopback /16 picked at
random per cluster (127.N.0.0/16), so a simulated vLLM engine can listen on a pod's own IP and two
clusters on one machine (parallel test runs) seldom share pod IPs. kwok's pod stages are its own
except where kwok-pod-stages.yaml says (model downloaders, real-engine pods). `stop()` ends every process,
also after a failure.
"""

from __future__ import annotations

import json
import pathlib
import secrets
import ssl
import subprocess
import tempfile
import urllib.request
from typing import Any

import yaml

from shardwise.devcluster import binaries, topology
from shardwise.devcluster.processes import Process, free_port, wait_until

KWOK_POD_STAGES = pathlib.Path(__file__).with_name("kwok-pod-stages.yaml")
SERVICE_CIDR = "10.96.0.0/16"  # allocated by the API server only; nothing listens or is sent there


class LocalCluster:
    def __init__(self, work_dir: pathlib.Path | None = None, *, bins: dict[str, pathlib.Path] | None = None,
                 controller_manager_qps: int = 100) -> None:
        self.work_dir = pathlib.Path(work_dir or tempfile.mkdtemp(prefix="shardwise-cluster-"))
        self.controller_manager_qps = controller_manager_qps
        self.bins = bins or binaries.find_binaries()
        self.token = secrets.token_hex(16)
        # Each client gets a user of its own, so the audit log tells who wrote what.
        self.user_tokens = {user: secrets.token_hex(16) for user in ("shardwise-operator", "shardwise-sim")}
        self.port = 0
        self.pod_cidr = f"127.{secrets.randbelow(200) + 20}.0.0/16"
        self.processes: list[Process] = []

    # -- public -----------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.work_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def audit_log(self) -> pathlib.Path:
        """Every write request, one JSON line each (reads are not logged)."""
        return self.work_dir / "audit.log"

    def user_kubeconfig(self, user: str) -> pathlib.Path:
        path = self.work_dir / f"kubeconfig-{user}"
        path.write_text(yaml.safe_dump(self._kubeconfig_dict(self.user_tokens[user])))
        return path

    @property
    def log_dir(self) -> pathlib.Path:
        return self.work_dir / "logs"

    def start(self) -> "LocalCluster":
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._start("kube-controller-manager", [
                str(self.bins["kube-controller-manager"]), f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--controllers=*", "--secure-port=0",
                f"--service-account-private-key-file={self.work_dir / 'sa.key'}",
                f"--root-ca-file={self.work_dir / 'pki' / 'apiserver.crt'}",
                # kwok renews node leases; the grace period is long because on a busy 2-core
                # machine a late renewal would mark every pod NotReady and kwok never flips it back.
                "--concurrent-gc-syncs=5", "--node-monitor-grace-period=180s",
                # Upstream's client limit (20 requests/s, burst 30, shared by every controller) is
                # sized for small clusters: with hundreds of Deployments converging, ReplicaSet and
                # Deployment status then trail their pods by a minute. Managed offerings raise it
                # (Huawei CCE defaults to 100; 200 past 1,000 nodes); so does this control plane.
                f"--kube-api-qps={self.controller_manager_qps}",
                f"--kube-api-burst={max(self.controller_manager_qps, 30)}",
            ])
            self._start("kube-scheduler", [
                str(self.bins["kube-scheduler"]), f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--secure-port=0",
            ])
            self._start("kwok", [
                str(self.bins["kwok"]), f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={topology.KWOK_ANNOTATION}=fake",
                f"--cidr={self.pod_cidr}", "--node-ip=127.0.0.1", f"--server-address=127.0.0.1:{free_port()}",
                "--node-lease-duration-seconds=40", f"--config={KWOK_POD_STAGES}",
            ])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.bins["kubectl"]), f"--kubeconfig={self.kubeconfig}", *args],
                                input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def add_nodes(self, topology_file: pathlib.Path) -> list[str]:
        nodes = topology.node_objects(topology.load_groups(topology_file))
        self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(nodes))
        names = [n["metadata"]["name"] for n in nodes]
        wait_until(lambda: self._nodes_ready(names), timeout=60, what=f"nodes {names} Ready (kwok)")
        return names

    def install_crd(self, path: pathlib.Path) -> None:
        self.kubectl("apply", "--server-side", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")

    # -- internals --------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.log_dir / f"{name}.log")
        process.start()
        self.processes.append(process)
        return process

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._start("etcd", [
            str(self.bins["etcd"]), f"--data-dir={self.work_dir / 'etcd'}", "--name=default",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn",
        ])
        wait_until(lambda: urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2).status == 200,
                   timeout=30, what="etcd /health", process=etcd)

    def _start_apiserver(self) -> None:
        pki = self.work_dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        sa_key = self.work_dir / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        (self.work_dir / "tokens.csv").write_text("".join(
            f'{token},{user},{user},"system:masters"\n'
            for user, token in {"admin": self.token, **self.user_tokens}.items()))
        (self.work_dir / "audit-policy.yaml").write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
            "rules:\n- level: None\n  verbs: [get, list, watch]\n- level: Metadata\n")
        self.port = free_port()
        apiserver = self._start("kube-apiserver", [
            str(self.bins["kube-apiserver"]), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={pki}", f"--token-auth-file={self.work_dir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
            "--allow-privileged=true", "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={self.work_dir / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
        ])
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

        def ready() -> bool:
            request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            return urllib.request.urlopen(request, timeout=5, context=context).status == 200

        wait_until(ready, timeout=120, interval=0.5, what="kube-apiserver /readyz", process=apiserver)

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(yaml.safe_dump(self._kubeconfig_dict(self.token)))
        wait_until(lambda: self.kubectl("get", "--raw=/readyz", check=False).returncode == 0,
                   timeout=30, what="kubectl to reach the API server with the kubeconfig")

    def _kubeconfig_dict(self, token: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": "shardwise-local",
            "clusters": [{"name": "shardwise-local", "cluster": {
                "server": self.server,
                # The API server's self-generated cert chains to a CA it writes beside it.
                "certificate-authority": str(self.work_dir / "pki" / "apiserver.crt")}}],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "shardwise-local", "context": {"cluster": "shardwise-local", "user": "user"}}],
        }

    def _nodes_ready(self, names: list[str]) -> bool:
        items = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        ready = {
            n["metadata"]["name"] for n in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
        }
        return set(names) <= ready
