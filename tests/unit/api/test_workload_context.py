"""Issue 36 item 6: a declared workload longer than the context one request may use is refused.

vLLM refuses every request whose prompt + output tokens exceed --max-model-len, so predictions for
such a workload are for traffic that cannot happen. The API server refuses it with a CEL rule
(tests/e2e/test_validation_workload.py); here the pydantic side (offline files, objects stored
before the rule), `shardwise plan -f`, and the CRD carrying the rule.
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import yaml

from shardwise.api import crd, workload
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import reconcile
from shardwise.planner import cli

NODES = Path(__file__).resolve().parents[2] / "fixtures/nodes/h100-nvswitch-2x8.yaml"
PLACEMENT = {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}
MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct"}


def spec(workload_: dict | None = None, max_model_len: int | None = None) -> dict:
    body: dict = {"model": MODEL, "placement": PLACEMENT}
    if workload_ is not None:
        body["workload"] = workload_
    if max_model_len is not None:
        body["serving"] = {"maxModelLen": max_model_len}
    return body


# (case, spec, the numbers the sentence names: prompt, output, needed, maxModelLen; None: it fits)
CASES = [
    ("the issue's case", spec({"promptTokens": 16000, "outputTokens": 2000}, 8192), (16000, 2000, 18000, 8192)),
    ("prompt alone beyond the default context", spec({"promptTokens": 8000}), (8000, 256, 8256, 8192)),
    ("output alone beyond a set context", spec({"outputTokens": 4000}, 4096), (1024, 4000, 5024, 4096)),
    ("one token over", spec({"promptTokens": 4000, "outputTokens": 97}, 4096), (4000, 97, 4097, 4096)),
    ("exactly the context", spec({"promptTokens": 4000, "outputTokens": 96}, 4096), None),
    ("raised context", spec({"promptTokens": 16000, "outputTokens": 2000}, 18000), None),
    ("the defaults", spec(), None),
    # A CPU test engine at 512 tokens with no workload declared: the planner's default shape does
    # not fit, but the user said nothing wrong.
    ("small context, no workload", spec(None, 512), None),
    ("small context, workload without token counts", spec({"concurrency": 2}, 512), None),
]


def sentence(numbers: tuple[int, int, int, int]) -> str:
    prompt, output, needed, limit = numbers
    return (f"spec.workload: a request of {prompt} prompt + {output} output tokens needs {needed} tokens of "
            f"context; serving.maxModelLen is {limit}, so vLLM would refuse every such request")


@pytest.mark.parametrize("case,body,numbers", CASES, ids=[c[0] for c in CASES])
def test_the_model_refuses_a_declared_workload_longer_than_its_context(case: str, body: dict, numbers) -> None:
    if numbers is None:
        InferenceDeploymentSpec.model_validate(body)
        return
    with pytest.raises(pydantic.ValidationError) as raised:
        InferenceDeploymentSpec.model_validate(body)
    message = raised.value.errors()[0]["msg"]
    assert sentence(numbers) in message, case
    assert message.endswith("raise serving.maxModelLen to at least that"), message


def test_the_operator_reports_the_sentence_itself() -> None:
    """An object stored before the rule: InvalidSpec carries the sentence, not pydantic's wrapping."""
    got = reconcile.parse_spec({"spec": spec({"promptTokens": 16000, "outputTokens": 2000}, 8192)})
    assert isinstance(got, str) and got.startswith(sentence((16000, 2000, 18000, 8192))), got


@pytest.mark.parametrize("case,body,numbers", CASES, ids=[c[0] for c in CASES])
def test_plan_refuses_the_same_workloads_with_the_same_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                case: str, body: dict, numbers) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                                    "metadata": {"name": "x"}, "spec": body}))
    code = cli.main(["plan", "-f", str(path), "--nodes", str(NODES), "-o", "json"])
    err = capsys.readouterr().err
    if numbers is None:
        assert code == 0, err
    else:
        assert code == cli.EXIT_BAD_INPUT
        assert err.startswith(f"error: {sentence(numbers)}"), err


def test_the_crd_carries_the_rule_and_no_token_defaults() -> None:
    """Without defaults in the CRD, the rule tells a declared workload from the planner's guess."""
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert workload.CEL_RULE in schema["x-kubernetes-validations"]
    tokens = schema["properties"]["workload"]["properties"]
    assert "default" not in tokens["promptTokens"] and "default" not in tokens["outputTokens"]
    # The defaults the rule assumes are the model's.
    defaults = InferenceDeploymentSpec.model_validate({"model": MODEL}).workload
    assert (defaults.promptTokens, defaults.outputTokens) == (workload.DEFAULT_PROMPT_TOKENS,
                                                             workload.DEFAULT_OUTPUT_TOKENS)
    for text in (workload.CEL_RULE["rule"], workload.CEL_RULE["messageExpression"]):
        assert f": {workload.DEFAULT_PROMPT_TOKENS})" in text and f": {workload.DEFAULT_OUTPUT_TOKENS})" in text
