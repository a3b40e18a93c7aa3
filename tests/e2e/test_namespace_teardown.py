"""Deleting a namespace ends its InferenceDeployments quietly: the operator does not fight the
namespace controller by re-creating or re-applying children that are being deleted, and a
"namespace is being terminated" refusal is not retried hot."""

from __future__ import annotations

import pytest

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, Kubectl, OperatorProcess, eventually, writes_by
from tests.e2e.test_lifecycle import ready, small_model

pytestmark = pytest.mark.e2e

CHILD_RESOURCES = {"deployments", "services", "leaderworkersets"}


def test_namespace_deletion_does_not_reapply_children(operator: OperatorProcess, kubectl: Kubectl,
                                                      cluster: LocalCluster) -> None:
    names = ["gone-0", "gone-1"]
    for name in names:
        kubectl.apply_yaml(small_model(name))
    for name in names:
        eventually(lambda: ready(kubectl, name), timeout=120, what=f"{name} Ready")
    before = len(writes_by(cluster, OPERATOR_USER, kubectl.namespace))
    assert before > 0, "the audit log saw no operator writes at all: the check would be vacuous"

    cluster.kubectl("delete", "namespace", kubectl.namespace, "--wait=false")
    eventually(lambda: cluster.kubectl("get", "namespace", kubectl.namespace, check=False).returncode != 0,
               timeout=240, interval=1.0, what="the namespace to be gone")

    after = writes_by(cluster, OPERATOR_USER, kubectl.namespace)[before:]
    child_writes = [e for e in after if (e.get("objectRef") or {}).get("resource") in CHILD_RESOURCES
                    and e.get("verb") != "delete"]
    described = ", ".join(f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')} "
                          f"-> {(e.get('responseStatus') or {}).get('code')}" for e in child_writes)
    # Nothing re-created or re-applied; at most the one refused write per deployment that tells the
    # operator the namespace is being terminated (then its keys are dropped, not retried).
    accepted = [e for e in child_writes if (e.get("responseStatus") or {}).get("code", 0) < 400]
    assert accepted == [], f"children re-applied during teardown: {described}"
    assert len(child_writes) <= len(names), f"{len(child_writes)} child writes during teardown: {described}"
    # Status writes and events as each deployment winds down (pods going, readiness falling) are
    # fine, a handful each; a retry loop makes dozens.
    assert len(after) <= 10 * len(names), "writes during teardown: " + ", ".join(
        f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('subresource', '')}" for e in after)
    assert operator.process.alive()
