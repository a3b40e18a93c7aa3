"""Helpers for integration tests: the operator as a real process, bounded polling, object access."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.processes import Process, free_port
from shardwise.devcluster.scrape import operator_metrics

T = TypeVar("T")
ROOT = pathlib.Path(__file__).resolve().parents[2]
OPERATOR_USER = "shardwise-operator"
# Live metrics settle in seconds, not minutes: scrape every 2 s over a 15 s window.
# An unused model cache goes after 5 s instead of an hour.
COMPRESSED_TIMINGS = {"SHARDWISE_METRICS_INTERVAL_SECONDS": "2", "SHARDWISE_METRICS_WINDOW_SECONDS": "15",
                      "SHARDWISE_MODEL_CACHE_GRACE_SECONDS": "5", "SHARDWISE_MODEL_CACHE_POLL_SECONDS": "1"}


def writes_by(cluster: LocalCluster, user: str, namespace: str) -> list[dict[str, Any]]:
    """Write requests (create/update/patch/delete) that `user` made in `namespace`, from the audit log."""
    out = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (event.get("user", {}).get("username") == user and ref.get("namespace") == namespace
                and event.get("verb") in ("create", "update", "patch", "delete") and event.get("stage") == "ResponseComplete"):
            out.append(event)
    return out


def eventually(probe: Callable[[], T], *, timeout: float = 60.0, interval: float = 0.5, what: str) -> T:
    """Poll until probe() returns something truthy; on timeout, say what it last saw."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - shown when the wait fails
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last saw: {last!r}")
        time.sleep(interval)


def simulated_fleet(cluster: LocalCluster, namespace: str, prefix: str) -> Process:
    """The simulated engines for the serving pods of one namespace (not started yet)."""
    return Process(f"{prefix}-fleet-{namespace}", [sys.executable, "-m", "shardwise_runtime.sim.server", "fleet",
                                                   "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace],
                   cluster.log_dir / f"{prefix}-fleet-{namespace}.log", env={"PYTHONUNBUFFERED": "1"})


class OperatorProcess:
    """`shardwise run` as a separate process, exactly as it runs in a cluster."""

    def __init__(self, cluster: LocalCluster, *, resync_seconds: float = 3.0, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, name: str = "operator") -> None:
        self.cluster = cluster
        self.metrics_port = free_port()
        self.health_port = free_port()
        argv = [sys.executable, "-m", "shardwise.cli", "run", "--resync-seconds", str(resync_seconds),
                "--health-port", str(self.health_port), "--metrics-port", str(self.metrics_port), *extra_args]
        self.log = cluster.log_dir / f"{name}.log"
        # POD_NAME as in the chart: the identity on the leader Lease, kept across restarts.
        self.process = Process(name, argv, self.log,
                               env={"KUBECONFIG": str(cluster.user_kubeconfig(OPERATOR_USER)), "PYTHONUNBUFFERED": "1",
                                    "POD_NAME": name, **COMPRESSED_TIMINGS, **(env or {})})

    def start(self) -> "OperatorProcess":
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL, as an OOM kill or a node loss would: no shutdown code runs."""
        assert self.process.popen is not None
        os.killpg(self.process.popen.pid, signal.SIGKILL)
        self.process.popen.wait(10)

    @property
    def pid(self) -> int | None:
        return self.process.popen.pid if self.process.popen is not None else None

    def probe(self, path: str) -> tuple[int, str]:
        """GET a health endpoint as the kubelet does: the status code and the text."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def metrics(self) -> dict[str, float]:
        """The operator's own unlabelled metrics (name -> value); {} while it does not answer."""
        return {name: value for name, value in operator_metrics(self.metrics_port).items() if "{" not in name}

    def settled(self, min_reconciles: int = 1) -> bool:
        """Synced, leading, at least `min_reconciles` done and nothing left in the queue."""
        m = self.metrics()
        return (m.get("shardwise_caches_synced") == 1 and m.get("shardwise_leader") == 1
                and m.get("shardwise_reconciles_total", 0) >= min_reconciles and m.get("shardwise_workqueue_depth") == 0)


class Kubectl:
    """kubectl against the local cluster, scoped to one namespace, returning parsed JSON."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def run(self, *args: str, input: str | None = None, check: bool = True):
        return self.cluster.kubectl("-n", self.namespace, *args, input=input, check=check)

    def get(self, kind: str, name: str | None = None, *, selector: str | None = None) -> Any:
        args = ["get", kind] + ([name] if name else []) + (["-l", selector] if selector else []) + ["-o", "json"]
        result = self.run(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise RuntimeError(result.stderr)
        return json.loads(result.stdout)

    def apply_yaml(self, text: str) -> str:
        return self.run("apply", "-f", "-", input=text).stdout

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get("infd", name) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)
