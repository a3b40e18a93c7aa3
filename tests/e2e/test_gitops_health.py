"""One health story: kstatus (sigs.k8s.io/cli-utils, as Flux and kpt run it), the Flux
healthCheckExprs we ship (cel-go) and the Argo CD Lua we ship (Lua 5.1) give the verdict of the
health rule in docs/gitops.md on canonical states the real operator produced."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually
from tests.e2e.test_failures import model

pytestmark = pytest.mark.e2e
lua51 = pytest.importorskip("lupa.lua51", reason="lupa (a Lua runtime for Python) is in the [test] extra")

LUA = (ROOT / "examples/gitops/argocd-health.lua").read_text()
FLUX = next(d for d in yaml.safe_load_all((ROOT / "examples/gitops/flux-kustomization.yaml").read_text())
            if d["kind"] == "Kustomization")["spec"]["healthCheckExprs"][0]
IN_PROGRESS, CURRENT, FAILED = ("InProgress", "InProgress", "Progressing"), ("Current", "Current", "Healthy"), \
    ("Failed", "Failed", "Degraded")


@pytest.fixture(scope="module")
def checker() -> str:
    result = subprocess.run(["bash", str(ROOT / "hack/build-gitops-health.sh")], capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def verdicts(checker: str, obj: dict[str, Any]) -> tuple[str, str, str]:
    exprs = {k: FLUX.get(k, "") for k in ("inProgress", "failed", "current")}
    out = subprocess.run([checker], input=json.dumps({"exprs": exprs, "objects": [obj]}), capture_output=True,
                         text=True, check=True, timeout=60)
    tools = json.loads(out.stdout)
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    argo = lua.execute(LUA)
    return tools["kstatus"], tools["flux"], argo["status"]


def condition(obj: dict, type_: str) -> tuple[str, str] | None:
    c = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)
    return (c["status"], c["reason"]) if c else None


def observed(kubectl: Kubectl, name: str, check) -> dict:
    def probe() -> dict | None:
        obj = kubectl.get("infd", name) or {}
        status = obj.get("status") or {}
        return obj if status.get("observedGeneration") == obj["metadata"]["generation"] and check(obj) else None
    return eventually(probe, timeout=120, what=f"{name} in its canonical state")


def test_kstatus_flux_and_argo_agree_on_canonical_states(operator: OperatorProcess, kubectl: Kubectl,
                                                         checker: str) -> None:
    states: dict[str, tuple[dict, tuple[str, str, str]]] = {}

    # New: exactly what the API server stored and returned, before any operator write.
    created = json.loads(kubectl.run("create", "-o", "json", "-f", "-", input=model("fresh")).stdout)
    assert created["status"] == {"observedGeneration": 0}
    states["new, not yet observed"] = (created, IN_PROGRESS)

    kubectl.apply_yaml(model("loading", serving={"image": "kwok.shardwise.invalid/never-ready:1"}))
    kubectl.apply_yaml(model("waiting", placement={"gpuProducts": ["NVIDIA-A100-80GB-PCIe"]}, replicas=12))
    kubectl.apply_yaml(model("infeasible", placement={"gpuProducts": ["NVIDIA-B200"]}))
    kubectl.apply_yaml(model("failed", serving={"image": "kwok.shardwise.invalid/image-pull-backoff:1"}))
    states["progressing (loading weights)"] = (
        observed(kubectl, "loading", lambda o: condition(o, "Reconciling") == ("True", "RollingOut")
                 and condition(o, "Degraded") == ("False", "AsExpected")), IN_PROGRESS)
    states["unschedulable"] = (
        observed(kubectl, "waiting", lambda o: condition(o, "Degraded") == ("True", "Unschedulable")), IN_PROGRESS)
    states["ready"] = (observed(kubectl, "fresh", lambda o: condition(o, "Ready") == ("True", "Ready")), CURRENT)
    states["infeasible"] = (observed(kubectl, "infeasible", lambda o: (condition(o, "Planned") or ("",))[0] == "False"),
                            FAILED)
    states["failed (image pull)"] = (
        observed(kubectl, "failed", lambda o: condition(o, "Stalled") == ("True", "ImagePullBackOff")), FAILED)

    kubectl.run("patch", "infd", "fresh", "--type=merge", "-p", '{"spec":{"serving":{"maxModelLen":2048}}}')
    edited = kubectl.get("infd", "fresh")
    if (edited.get("status") or {}).get("observedGeneration") != edited["metadata"]["generation"]:
        states["edited, not yet observed"] = (edited, IN_PROGRESS)  # only when caught before the operator

    table = {name: verdicts(checker, obj) for name, (obj, _) in states.items()}
    for name, got in table.items():
        print(f"{name:32} kstatus={got[0]:10} flux={got[1]:10} argo={got[2]}")
    assert len(states) >= 6
    assert {name: got for name, got in table.items()} == {name: want for name, (_, want) in states.items()}
