"""Issue 36 item 6: a declared workload that cannot fit the context is refused at admission.

vLLM refuses every request whose prompt + output tokens exceed --max-model-len; a workload of
16,000 + 2,000 tokens on maxModelLen 8192 used to be planned, served and Ready without a word. The
API server refuses it now (a CEL rule on the spec, api/workload.py) with the sentence the pydantic
model gives offline, numbers included: the expected text is computed by the Python side so the two
cannot drift apart. A spec that declares no workload keeps a small maxModelLen (the CPU engines).
"""

from __future__ import annotations

import json

import pydantic
import pytest
import yaml

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from tests.e2e.support import Kubectl
from tests.e2e.test_validation import with_spec

pytestmark = pytest.mark.e2e


def python_sentence(doc: dict) -> str:
    with pytest.raises(pydantic.ValidationError) as raised:
        InferenceDeploymentSpec.model_validate(doc["spec"])
    return str(raised.value.errors()[0]["msg"]).removeprefix("Value error, ")


# (case, object, the numbers the message must name)
REFUSED = [
    ("the issue's case", with_spec(workload={"promptTokens": 16000, "outputTokens": 2000},
                                   serving={"maxModelLen": 8192}), ["16000 prompt + 2000 output", "18000", "8192"]),
    ("prompt alone, maxModelLen defaulted", with_spec(workload={"promptTokens": 8000}),
     ["8000 prompt + 256 output", "8256", "8192"]),
    ("output alone beside a set maxModelLen", with_spec(workload={"outputTokens": 4000}, serving={"maxModelLen": 4096}),
     ["1024 prompt + 4000 output", "5024", "4096"]),
]


@pytest.mark.parametrize("case,doc,numbers", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_workload_longer_than_the_context_is_refused_with_the_numbers(kubectl: Kubectl, case: str, doc: dict,
                                                                       numbers: list[str]) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    assert "spec.workload" in result.stderr, result.stderr
    assert python_sentence(doc) in result.stderr, f"{case}: {result.stderr.strip()}"
    for number in numbers:
        assert number in result.stderr, f"{case}: {number!r} not in {result.stderr.strip()}"


def test_an_update_that_makes_the_workload_too_long_is_refused(kubectl: Kubectl) -> None:
    doc = with_spec(workload={"promptTokens": 6000, "outputTokens": 2000}, serving={"maxModelLen": 8192})
    doc["metadata"]["name"] = "fits"
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    result = kubectl.run("patch", "infd", "fits", "--type=merge", "-p",
                         json.dumps({"spec": {"serving": {"maxModelLen": 4096}}}), check=False)
    assert result.returncode != 0, "a maxModelLen below the declared workload was accepted"
    assert "needs 8000 tokens of context; serving.maxModelLen is 4096" in result.stderr, result.stderr
    assert kubectl.get("infd", "fits")["spec"]["serving"]["maxModelLen"] == 8192


ACCEPTED = [
    ("exactly the context", with_spec(workload={"promptTokens": 4000, "outputTokens": 96},
                                      serving={"maxModelLen": 4096})),
    # The planner's default shape (1024 + 256) does not fit 512 tokens, but nothing was declared.
    ("small context, no workload", with_spec(serving={"maxModelLen": 512})),
    ("small context, only a concurrency", with_spec(workload={"concurrency": 2}, serving={"maxModelLen": 512})),
]


@pytest.mark.parametrize("case,doc", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_a_workload_that_fits_or_is_not_declared_is_accepted(kubectl: Kubectl, case: str, doc: dict) -> None:
    result = kubectl.run("create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(doc),
                         check=False)
    assert result.returncode == 0, f"{case}: {result.stderr.strip()}"
    stored = json.loads(result.stdout)["spec"]
    # The API server writes no token defaults, so the rule still sees what the user declared.
    assert stored.get("workload", {}).keys() <= (doc["spec"].get("workload") or {}).keys(), stored
