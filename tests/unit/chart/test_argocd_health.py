"""The Argo CD health check (examples/gitops/argocd-health.lua), run by a real Lua 5.1 (Argo CD's
gopher-lua speaks 5.1) against statuses the operator's own status code produces."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from chart_support import ROOT

from shardwise.api import v1alpha1 as api
from shardwise.decide import progress
from shardwise.render import children

lua51 = pytest.importorskip("lupa.lua51", reason="lupa (a Lua runtime for Python) is in the [test] extra")

SCRIPT_PATH = ROOT / "examples" / "gitops" / "argocd-health.lua"
SCRIPT = SCRIPT_PATH.read_text()
NOW = "2026-01-01T00:00:00Z"
OWNER = children.Owner(name="llama-8b", namespace="ml", uid="u-1")
SPEC = api.InferenceDeploymentSpec.model_validate(
    yaml.safe_load((ROOT / "examples" / "gitops" / "models" / "llama-8b.yaml").read_text())["spec"])
PLAN = {"feasible": True, "reason": "1 x NVIDIA-L40S fits", "tensorParallel": 1, "pipelineParallel": 1}
INFEASIBLE = {"feasible": False, "reasonCode": "NoFittingGPUs", "reason": "no GPU has 16 GiB free"}


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT)
    return result["status"], result["message"]


def workload(ready: int, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "replicas": 1, "readyReplicas": ready, "updatedReplicas": 1}}


def infd(generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND,
                           "metadata": {"name": OWNER.name, "namespace": OWNER.namespace, "generation": generation}}
    if status is not None:
        obj["status"] = status
    return obj


def status(plan: dict[str, Any], live: dict[str, Any] | None, generation: int = 1,
           before: dict[str, Any] | None = None) -> dict[str, Any]:
    return progress.build_status(SPEC, plan, live, [], before or {}, owner=OWNER, generation=generation, now=NOW)


UNSCHEDULABLE_POD = {"metadata": {"name": "llama-8b-0"}, "status": {"conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/5 nodes are available"}]}}

IMAGE_PULL_POD = {"metadata": {"name": "llama-8b-0"}, "status": {"containerStatuses": [
    {"name": "vllm", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}

CASES = [
    ("never reconciled", infd(1, None), "Progressing", "Waiting for the shardwise operator"),
    ("ready", infd(1, status(PLAN, workload(ready=1))), "Healthy", "Ready: 1/1 replicas ready"),
    ("rolling out", infd(1, status(PLAN, workload(ready=0))), "Progressing", "RollingOut: 0/1 replicas ready"),
    ("workload not yet observed", infd(1, status(PLAN, workload(ready=1, generation=2))), "Progressing",
     "RollingOut"),
    ("new spec not observed yet", infd(2, status(PLAN, workload(ready=1))), "Progressing",
     "Generation 2 not yet observed (status is for 1)"),
    ("stale failure, fixed spec", infd(3, progress.invalid_spec_status({}, "bad", generation=2, now=NOW)),
     "Progressing", "Generation 3 not yet observed"),
    ("invalid spec", infd(1, progress.invalid_spec_status({}, "spec.model.name: too short", generation=1, now=NOW)),
     "Degraded", "InvalidSpec: spec.model.name: too short"),
    ("no GPU fits", infd(1, status(INFEASIBLE, None)), "Degraded", "NoFittingGPUs: no GPU has 16 GiB free"),
    ("unschedulable", infd(1, progress.build_status(SPEC, PLAN, workload(ready=0), [UNSCHEDULABLE_POD], {},
                                                    owner=OWNER, generation=1, now=NOW)),
     "Progressing", "Unschedulable: pod llama-8b-0 cannot be scheduled"),
    ("defaulted status of a new object", infd(1, {"observedGeneration": 0}), "Progressing", "Waiting for"),
    ("image pull failure", infd(1, progress.build_status(SPEC, PLAN, workload(ready=0), [IMAGE_PULL_POD], {},
                                                         owner=OWNER, generation=1, now=NOW)),
     "Degraded", "ImagePullBackOff: pod llama-8b-0 container vllm: ImagePullBackOff"),
    ("status without conditions", infd(1, {"observedGeneration": 1}), "Progressing", "Not ready yet"),
]


@pytest.mark.parametrize(("obj", "expected", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_health_of_operator_written_status(obj: dict[str, Any], expected: str, message: str) -> None:
    got, got_message = health(obj)
    assert got == expected, got_message
    assert got_message.startswith(message), got_message


def test_ready_condition_of_an_older_generation_is_not_healthy() -> None:
    # status.observedGeneration moved on, but a Ready=True left from the previous generation must not count.
    st = status(PLAN, workload(ready=1))
    st["observedGeneration"] = 2
    assert health(infd(2, st))[0] == "Progressing"


def test_docs_and_argocd_config_carry_the_same_script() -> None:
    doc = (ROOT / "docs" / "gitops.md").read_text()
    blocks = re.findall(r"```lua\n(.*?)```", doc, flags=re.S)
    assert blocks == [SCRIPT]
    patch = yaml.safe_load((ROOT / "examples" / "gitops" / "argocd-cm-patch.yaml").read_text())
    assert patch["data"]["resource.customizations.health.shardwise.io_InferenceDeployment"] == SCRIPT
