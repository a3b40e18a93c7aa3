"""The API server itself rejects bad specs, with a message a person can act on (schema + CEL)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.e2e.support import Kubectl

pytestmark = pytest.mark.e2e

VALID = {
    "apiVersion": "shardwise.io/v1alpha1",
    "kind": "InferenceDeployment",
    "metadata": {"name": "bad"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
}


def with_spec(**changes) -> dict:
    doc = copy.deepcopy(VALID)
    for dotted, value in changes.items():
        node = doc["spec"]
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        if value is _DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


_DELETE = object()
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "slo": {"ttftP95": "500ms"}}

# (case, object, words the API server's message must contain)
CORPUS = [
    ("no model", with_spec(model=_DELETE), ["spec.model", "Required value"]),
    ("empty model name", with_spec(model__name=""), ["spec.model.name", "at least 1 chars"]),
    ("unknown dtype", with_spec(model__dtype="int3"), ["spec.model.dtype", 'Unsupported value: "int3"']),
    ("int4 with fp8", with_spec(model__dtype="fp8", model__quantization="awq"), ["cannot be combined with dtype fp8"]),
    ("unknown quantization", with_spec(model__quantization="bnb"), ["spec.model.quantization", "Unsupported value"]),
    ("zero context", with_spec(serving__maxModelLen=0), ["spec.serving.maxModelLen", "greater than or equal to 1"]),
    ("negative context", with_spec(serving__maxModelLen=-8192), ["spec.serving.maxModelLen"]),
    ("zero concurrency", with_spec(serving__maxConcurrency=0), ["spec.serving.maxConcurrency"]),
    ("memory fraction above 0.99", with_spec(serving__gpuMemoryUtilization=1.5),
     ["spec.serving.gpuMemoryUtilization", "less than or equal to 0.99"]),
    ("memory fraction zero", with_spec(serving__gpuMemoryUtilization=0), ["spec.serving.gpuMemoryUtilization"]),
    ("planner flag in extraArgs", with_spec(serving__extraArgs=["--tensor-parallel-size=4"]),
     ["may not set a flag shardwise sets itself"]),
    ("tensor without pipeline", with_spec(parallelism={"tensor": 4}), ["must be set together"]),
    ("zero tensor parallelism", with_spec(parallelism={"tensor": 0, "pipeline": 1}), ["spec.parallelism.tensor"]),
    ("unknown objective", with_spec(parallelism={"objective": "Fastest"}),
     ["spec.parallelism.objective", 'Unsupported value: "Fastest"']),
    ("negative replicas", with_spec(replicas=-1), ["spec.replicas", "greater than or equal to 0"]),
    ("min above max", with_spec(autoscaling={**AUTOSCALING, "minReplicas": 5}),
     ["minReplicas must not exceed autoscaling.maxReplicas"]),
    ("scale to zero without opt-in", with_spec(autoscaling={**AUTOSCALING, "minReplicas": 0}),
     ["allowScaleToZero", "cold start"]),
    ("no maxReplicas", with_spec(autoscaling={"slo": {"ttftP95": "1s"}}), ["spec.autoscaling.maxReplicas", "Required"]),
    ("SLO without targets", with_spec(autoscaling={**AUTOSCALING, "slo": {}}), ["needs at least one target"]),
    ("SLO that is not a duration", with_spec(autoscaling={**AUTOSCALING, "slo": {"ttftP95": "fast"}}),
     ["spec.autoscaling.slo.ttftP95", "should match"]),
    ("price that is not a number", with_spec(pricing={"gpuHourUSD": "two dollars"}),
     ["spec.pricing.gpuHourUSD", "should match"]),
    ("toleration operator", with_spec(placement={"tolerations": [{"key": "gpu", "operator": "Maybe"}]}),
     ["spec.placement.tolerations[0].operator"]),
]


@pytest.mark.parametrize("case,doc,words", CORPUS, ids=[c[0] for c in CORPUS])
def test_api_server_rejects_invalid_spec_with_a_clear_message(kubectl: Kubectl, case: str, doc: dict,
                                                             words: list[str]) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    for word in words:
        assert word in result.stderr, f"{case}: {word!r} not in: {result.stderr.strip()}"
    assert kubectl.get("infd", "bad") is None


def test_the_valid_base_is_accepted(kubectl: Kubectl) -> None:
    kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(VALID))
