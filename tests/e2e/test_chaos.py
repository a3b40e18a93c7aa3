"""Chaos: the operator SIGKILLed mid-rollout again and again, and the API server away for 30 s.

After each, the cluster converges: exactly one workload and one Service per InferenceDeployment,
carrying the latest spec, nothing orphaned; during the API outage the probes fail as documented
(readiness within a lease, liveness after --api-unreachable-seconds), the log stays quiet, and
the same process recovers when the API server returns.
"""

from __future__ import annotations

import random
import time

import pytest

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import Kubectl, OperatorProcess, eventually
from tests.e2e.test_lifecycle import ready, small_model

pytestmark = pytest.mark.e2e

NAMES = [f"chaos-{i}" for i in range(4)]
SELECTOR = "shardwise.io/inference-deployment"
UNREACHABLE_LIMIT = 12  # --api-unreachable-seconds of the operator under test


def converged(kubectl: Kubectl) -> bool:
    """Every deployment observed at its generation and its workload carrying the spec's concurrency."""
    for item in kubectl.get("infd")["items"]:
        name = item["metadata"]["name"]
        if (item.get("status") or {}).get("observedGeneration") != item["metadata"]["generation"]:
            return False
        deploy = kubectl.get("deployment", name)
        if deploy is None:
            return False
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        if args[args.index("--max-num-seqs") + 1] != str(item["spec"]["serving"]["maxConcurrency"]):
            return False
    return True


def no_duplicates_or_orphans(kubectl: Kubectl) -> None:
    names = sorted(i["metadata"]["name"] for i in kubectl.get("infd")["items"])
    deployments = sorted(d["metadata"]["name"] for d in kubectl.get("deployments")["items"])
    services = sorted(s["metadata"]["name"] for s in kubectl.get("services")["items"])
    lws = kubectl.get("leaderworkersets")
    assert deployments == names and services == names, (deployments, services, names)
    assert not (lws or {}).get("items"), lws


def test_twenty_sigkills_mid_rollout_then_one_of_everything(cluster: LocalCluster, without_session_operator: None,
                                                             kubectl: Kubectl) -> None:
    operator = OperatorProcess(cluster, name="operator-chaos").start()
    rng = random.Random(7)
    try:
        for name in NAMES:
            kubectl.apply_yaml(small_model(name, placement={}))
        for kill in range(20):
            # An edit in flight, then the kill somewhere in its reconcile, apply or status write.
            name = NAMES[kill % len(NAMES)]
            kubectl.run("patch", "infd", name, "--type=merge", "-p",
                        f'{{"spec":{{"serving":{{"maxConcurrency":{2 + kill % 6}}}}}}}')
            time.sleep(rng.uniform(0.2, 2.5))  # chaos timing, not an assertion
            operator.kill()
            operator.start()
        restarted = time.monotonic()
        eventually(lambda: converged(kubectl), timeout=30, what="convergence within 30 s of the last restart")
        assert time.monotonic() - restarted <= 30 + 5
        no_duplicates_or_orphans(kubectl)
        for name in NAMES:
            eventually(lambda name=name: ready(kubectl, name), timeout=120, what=f"{name} Ready")
        no_duplicates_or_orphans(kubectl)
    finally:
        operator.stop()


def apiserver(cluster: LocalCluster):
    return next(p for p in cluster.processes if p.name == "kube-apiserver")


def test_api_server_away_for_30_s_then_back_without_an_operator_restart(
        cluster: LocalCluster, without_session_operator: None, kubectl: Kubectl) -> None:
    operator = OperatorProcess(cluster, name="operator-outage",
                               extra_args=("--api-unreachable-seconds", str(UNREACHABLE_LIMIT))).start()
    try:
        kubectl.apply_yaml(small_model("outage", placement={}))
        eventually(lambda: ready(kubectl, "outage"), timeout=120, what="outage Ready")
        eventually(lambda: operator.probe("/healthz")[0] == 200 and operator.probe("/readyz")[0] == 200,
                   timeout=30, what="both probes passing")
        pid = operator.pid
        log_before = operator.log.read_text().count("\n")

        server = apiserver(cluster)
        stopped = time.monotonic()  # it stops answering at once; exiting may take seconds more
        server.stop()
        try:
            # Readiness goes within a lease duration (15 s) plus a retry; liveness after the limit.
            code, text = eventually(lambda: (r := operator.probe("/readyz"))[0] == 503 and r, timeout=25,
                                    what="/readyz to fail without the API server")
            code, text = eventually(lambda: (r := operator.probe("/healthz"))[0] == 503 and r, timeout=25,
                                    what="/healthz to fail past --api-unreachable-seconds")
            assert "unreachable" in text and time.monotonic() - stopped >= UNREACHABLE_LIMIT - 1
            time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))  # the outage lasts 30 s
        finally:
            server.start()
        eventually(lambda: cluster.kubectl("get", "--raw=/readyz", check=False).returncode == 0, timeout=120,
                   what="kube-apiserver back")
        back = time.monotonic()
        kubectl.run("patch", "infd", "outage", "--type=merge", "-p", '{"spec":{"serving":{"maxConcurrency":3}}}')
        eventually(lambda: converged(kubectl) and kubectl.get("infd", "outage")["status"]["observedGeneration"] == 2,
                   timeout=30, what="convergence within 30 s of the API server's return")
        assert time.monotonic() - back <= 30 + 5
        eventually(lambda: operator.probe("/healthz")[0] == 200 and operator.probe("/readyz")[0] == 200,
                   timeout=30, what="both probes passing again")
        assert operator.process.alive() and operator.pid == pid, "the operator restarted"

        outage_log = operator.log.read_text().splitlines()[log_before:]
        assert not [line for line in outage_log if "Traceback" in line], "\n".join(outage_log[-40:])
        # Bounded: one warning per loop when it starts failing, reminders a minute apart, one
        # recovery line each (about a dozen loops), not a line per second per loop.
        assert len(outage_log) <= 60, f"{len(outage_log)} log lines during a 30 s outage:\n" + "\n".join(outage_log)
    finally:
        operator.stop()
