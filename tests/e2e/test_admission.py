"""Admission closes the holes of issue 10: flags shardwise owns in any spelling, replicas beside
autoscaling, SLO targets of zero, tolerations the core API would refuse. Each case is rejected by
the API server itself (CRD schema + CEL) with a message that names the problem; every shipped
example still passes. New cases only: tests/e2e/test_validation.py keeps the original 22."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.e2e.support import ROOT, Kubectl, OperatorProcess, eventually
from tests.e2e.test_validation import AUTOSCALING, with_spec

pytestmark = pytest.mark.e2e

OWNED = "may not set a flag shardwise sets itself"
BOTH = "spec.replicas and spec.autoscaling cannot both be set"


def args(*items: str) -> dict:
    return with_spec(serving__extraArgs=list(items))


def slo(**targets: str) -> dict:
    return with_spec(autoscaling={**AUTOSCALING, "slo": targets})


def toleration(**fields) -> dict:
    return with_spec(placement={"tolerations": [fields]})


# (case, object, words the API server's message must contain)
CORPUS = [
    ("tp with equals", args("--tensor-parallel-size=4"), [OWNED]),
    ("tp as one item with a space", args("--tensor-parallel-size 4"), [OWNED, "spec.serving.extraArgs[0]"]),
    ("tp with underscores", args("--tensor_parallel_size", "4"), [OWNED]),
    ("tp short form", args("-tp", "4"), [OWNED]),
    ("tp short form with equals", args("-tp=4"), [OWNED]),
    ("pp short form in one item", args("-pp 2"), [OWNED]),
    ("pp underscores and equals", args("--pipeline_parallel_size=2"), [OWNED]),
    ("tp as an argparse prefix", args("--tensor-parallel", "2"), [OWNED]),
    ("model", args("--model", "other/model"), [OWNED]),
    ("model with equals", args("--model=other/model"), [OWNED]),
    ("dtype", args("--dtype=float32"), [OWNED]),
    ("quantization", args("--quantization", "fp8"), [OWNED]),
    ("quantization short form", args("-q", "awq"), [OWNED]),
    ("quantization short form with attached value", args("-qawq"), [OWNED]),
    ("host", args("--host=0.0.0.0"), [OWNED]),
    ("port as the second item", args("--enable-prefix-caching", "--port 9000"), [OWNED, "extraArgs[1]"]),
    ("max model len with underscores", args("--max_model_len=32768"), [OWNED]),
    ("memory fraction alias", args("--device-memory-utilization", "0.5"), [OWNED]),
    ("served model name", args("--served-model-name", "x"), [OWNED]),
    ("max num seqs with leading space", args(" --max-num-seqs=4"), [OWNED]),
    ("replicas beside autoscaling", with_spec(replicas=2, autoscaling=AUTOSCALING), [BOTH]),
    ("replicas 0 beside autoscaling", with_spec(replicas=0, autoscaling=AUTOSCALING), [BOTH]),
    ("ttft of zero", slo(ttftP95="0ms"), ["autoscaling.slo.ttftP95 must be above zero"]),
    ("itl of zero seconds", slo(itlP95="0s"), ["autoscaling.slo.itlP95 must be above zero"]),
    ("e2e of zero point zero", slo(e2eP95="0.0m"), ["autoscaling.slo.e2eP95 must be above zero"]),
    ("zero beside a real target", slo(ttftP95="500ms", itlP95="00ms"), ["itlP95 must be above zero"]),
    ("toleration without key needs Exists", toleration(operator="Equal", value="x"),
     ["without a key must use operator Exists"]),
    ("toleration Exists with a value", toleration(key="gpu", operator="Exists", value="yes"),
     ["operator Exists must not have a value"]),
    ("tolerationSeconds without NoExecute", toleration(key="gpu", operator="Exists", effect="NoSchedule",
                                                        tolerationSeconds=30), ["only to effect NoExecute"]),
    ("toleration key not a qualified name", toleration(key="bad key!", operator="Exists"),
     ["spec.placement.tolerations[0].key", "should match"]),
    ("toleration value not a label value", toleration(key="gpu", value="a value with spaces"),
     ["spec.placement.tolerations[0].value", "should match"]),
    ("toleration value too long", toleration(key="gpu", value="v" * 64), ["spec.placement.tolerations[0].value"]),
]
assert len(CORPUS) >= 30


@pytest.mark.parametrize("case,doc,words", CORPUS, ids=[c[0] for c in CORPUS])
def test_api_server_rejects_what_the_core_api_or_vllm_would(kubectl: Kubectl, case: str, doc: dict,
                                                            words: list[str]) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    for word in words:
        assert word in result.stderr, f"{case}: {word!r} not in: {result.stderr.strip()}"


# Real vLLM flags near the owned ones (same prefix, or owned names as values), and values of any form.
VALID_ARGS = [["--enable-prefix-caching"], ["--model-impl=transformers"], ["--quantization-config", "{}"],
              ["--enable-prefix-caching", "--allowed-media-domains", "a.example"], ["--max-num-batched-tokens", "8192"],
              ["-O3"], ["--kv-cache-dtype", "fp8"],
              ["--override-generation-config", '{"temperature": 0.5}']]


def test_valid_specs_and_every_example_are_accepted(kubectl: Kubectl) -> None:
    docs = [args(*items) for items in VALID_ARGS]
    docs += [toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute", tolerationSeconds=60),
             toleration(operator="Exists"), toleration(key="gpu", value="a100", effect="NoSchedule"),
             slo(ttftP95="0.5s", itlP95="10ms"), with_spec(autoscaling=AUTOSCALING)]
    examples = sorted((ROOT / "examples").glob("*.yaml")) + sorted((ROOT / "examples/gitops/models").glob("*.yaml"))
    for path in examples:
        for doc in yaml.safe_load_all(pathlib.Path(path).read_text()):
            if doc and doc.get("kind") == "InferenceDeployment":
                doc["metadata"].pop("namespace", None)
                docs.append(doc)
    assert len(docs) >= 18
    for doc in docs:
        result = kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False)
        assert result.returncode == 0, f"{doc['spec']}: {result.stderr}"


def test_kubectl_scale_on_an_autoscaled_resource_is_reported_as_ignored(operator: OperatorProcess,
                                                                       kubectl: Kubectl) -> None:
    doc = with_spec(autoscaling={**AUTOSCALING, "maxReplicas": 2},
                    serving={"maxModelLen": 4096, "maxConcurrency": 8}, placement={"gpuProducts": ["NVIDIA-L40S"]})
    doc["metadata"]["name"] = "scaled"
    kubectl.apply_yaml(yaml.safe_dump(doc))
    eventually(lambda: (kubectl.condition("scaled", "ReplicasIgnored") or {}).get("status") == "False",
               timeout=90, what="ReplicasIgnored=False before any scale")
    kubectl.run("scale", "infd", "scaled", "--replicas=5")
    cond = eventually(lambda: (c := kubectl.condition("scaled", "ReplicasIgnored")) and c["status"] == "True" and c,
                      timeout=60, what="ReplicasIgnored=True after kubectl scale")
    assert "spec.replicas=5" in cond["message"] and "between 1 and 2" in cond["message"]
    assert kubectl.get("infd", "scaled")["status"]["desiredReplicas"] <= 2

    def ignored_events() -> list[dict]:
        return [e for e in kubectl.get("events")["items"] if e["reason"] == "AutoscalingOwnsReplicas"]
    eventually(lambda: len(ignored_events()) == 1, timeout=30, what="one AutoscalingOwnsReplicas event")
    assert ignored_events()[0]["type"] == "Warning"


def test_max_model_len_beyond_the_context_window_is_flagged_with_the_numbers(operator: OperatorProcess,
                                                                           kubectl: Kubectl) -> None:
    doc = with_spec(model={"name": "Qwen/Qwen2.5-7B-Instruct"}, serving={"maxModelLen": 131072})
    doc["metadata"]["name"] = "too-long"
    kubectl.apply_yaml(yaml.safe_dump(doc))
    cond = eventually(lambda: (c := kubectl.condition("too-long", "Planned")) and c["status"] == "False" and c,
                      timeout=90, what="Planned=False")
    assert cond["reason"] == "MaxModelLenExceedsContext"
    assert "131072" in cond["message"] and "32768 tokens" in cond["message"]
    assert kubectl.condition("too-long", "Stalled")["status"] == "True"
    assert kubectl.get("deployment", "too-long") is None
