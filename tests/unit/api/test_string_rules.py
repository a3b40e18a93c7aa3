"""The string rules of issue 25 on the pydantic side: model ids, image references, extraArgs.

The same rules run as CEL at admission (tests/e2e/test_validation_strings.py checks the API server
says the same sentences); here each rule is pinned down case by case, and the CRD is checked to
carry exactly the rules the Python side runs.
"""

from __future__ import annotations

import pathlib
import re

import pydantic
import pytest
import yaml

from shardwise.api import checks, crd, extra_args, images, model_ids
from shardwise.api.v1alpha1 import InferenceDeploymentSpec

ROOT = pathlib.Path(__file__).resolve().parents[3]
DIGEST = "sha256:" + "ab" * 32


def error_of(spec: dict) -> tuple[str, str]:
    """(location, message) of the first validation error of `spec`."""
    with pytest.raises(pydantic.ValidationError) as raised:
        InferenceDeploymentSpec.model_validate(spec)
    first = raised.value.errors()[0]
    return ".".join(map(str, first["loc"])), first["msg"]


def named(name: str) -> dict:
    return {"model": {"name": name}}


def imaged(reference: str) -> dict:
    return {"model": {"name": "m/m"}, "serving": {"image": reference}}


def argv(*items: str) -> dict:
    return {"model": {"name": "m/m"}, "serving": {"extraArgs": list(items)}}


# (case, spec, where the error is, words its message must contain)
BAD = [
    ("leading space", named(" meta-llama/Llama-3.1-8B"), "model.name", "must not contain whitespace"),
    ("tab inside", named("meta-llama/Llama\t3"), "model.name", "must not contain whitespace"),
    ("trailing newline", named("meta-llama/Llama-3.1-8B\n"), "model.name", "must not contain whitespace"),
    ("command substitution", named("$(id)/Llama-3.1-8B"), "model.name", "shell syntax"),
    ("command substitution with spaces", named("$(curl -s x)/Llama"), "model.name", "shell syntax"),
    ("backticks", named("`id`/Llama-3.1-8B"), "model.name", "shell syntax"),
    ("semicolon", named("org/name;rm"), "model.name", "shell syntax"),
    ("hub URL", named("https://huggingface.co/meta-llama/Llama-3.1-8B"), "model.name",
     "not a URL: use the repo id meta-llama/Llama-3.1-8B"),
    ("hf.co URL with a path", named("https://hf.co/Qwen/Qwen2.5-7B/tree/main"), "model.name",
     "use the repo id Qwen/Qwen2.5-7B"),
    ("other URL", named("s3://bucket/model"), "model.name", "or an absolute path inside the container, not a URL"),
    ("hub URL without a name", named("https://huggingface.co/meta-llama"), "model.name", "not a URL"),
    ("three parts", named("datasets/org/name"), "model.name", "must be a Hugging Face repo id"),
    ("part of 97", named("org/" + "x" * 97), "model.name", "1 to 96 characters"),
    ("namespace of 97", named("x" * 97 + "/name"), "model.name", "1 to 96 characters"),
    ("leading dash", named("-org/name"), "model.name", "starting and ending with a letter"),
    ("trailing dot", named("org/name."), "model.name", "starting and ending with a letter"),
    ("empty part", named("org//name"), "model.name", "must be a Hugging Face repo id"),
    ("non-ASCII", named("org/café"), "model.name", "must be a Hugging Face repo id"),
    ("relative path", named("./models/llama"), "model.name", "must be a Hugging Face repo id"),
    ("double dash", named("org/na--me"), "model.name", "'--' or '..'"),
    ("double dot", named("or..g/name"), "model.name", "'--' or '..'"),
    (".git", named("org/name.git"), "model.name", "may not end in .git"),
    ("image trailing space", imaged("vllm/vllm-openai:v0.32.0 "), "serving.image", "must not contain whitespace"),
    ("image leading space", imaged(" vllm/vllm-openai"), "serving.image", "must not contain whitespace"),
    ("image URL", imaged("https://ghcr.io/org/vllm:1"), "serving.image", "not a URL: drop the scheme"),
    ("image uppercase path", imaged("Org/vllm:1"), "serving.image", "must be an image reference"),
    ("image uppercase after a registry", imaged("ghcr.io/Org/vllm:1"), "serving.image", "lowercase"),
    ("image tag of 129", imaged("vllm/vllm-openai:" + "t" * 129), "serving.image", "up to 128"),
    ("image tag starting with a dash", imaged("vllm/vllm-openai:-x"), "serving.image", "not starting with"),
    ("image empty tag", imaged("vllm/vllm-openai:"), "serving.image", "must be an image reference"),
    ("image digest too short", imaged("vllm/vllm-openai@sha256:abc"), "serving.image", "64 hex digits"),
    ("image digest uppercase", imaged("vllm/vllm-openai@sha256:" + "AB" * 32), "serving.image", "64 hex"),
    ("image double slash", imaged("vllm//vllm"), "serving.image", "must be an image reference"),
    ("image shell", imaged("$(id)"), "serving.image", "must be an image reference"),
    ("data-parallel size", argv("--data-parallel-size", "4"), "serving.extraArgs.0", "data-parallel"),
    ("-dp", argv("-dp", "4"), "serving.extraArgs.0", "may not set a flag shardwise sets itself"),
    ("-dp attached", argv("-dp4"), "serving.extraArgs.0", "may not set a flag shardwise sets itself"),
    ("-dpl", argv("-dpl=2"), "serving.extraArgs.0", "may not set a flag shardwise sets itself"),
    ("data-parallel rank underscores", argv("--data_parallel_rank", "1"), "serving.extraArgs.0", "sets itself"),
    ("data-parallel prefix", argv("--data-parallel", "2"), "serving.extraArgs.0", "sets itself"),
    ("--no- of an owned switch", argv("--no-data-parallel-external-lb"), "serving.extraArgs.0", "sets itself"),
    ("--distributed-executor-backend", argv("--distributed-executor-backend=ray"), "serving.extraArgs.0", "itself"),
    ("-n", argv("-n", "2"), "serving.extraArgs.0", "sets itself"),
    ("--node-rank", argv("--node-rank=1"), "serving.extraArgs.0", "sets itself"),
    ("--master-addr", argv("--master-addr", "10.0.0.1"), "serving.extraArgs.0", "sets itself"),
    ("--headless", argv("--headless"), "serving.extraArgs.0", "sets itself"),
    ("the existing tp rule still holds", argv("--tensor-parallel-size 4"), "serving.extraArgs.0", "sets itself"),
    ("&&", argv("--enforce-eager", "&&", "sh", "-c", "x"), "serving.extraArgs.1", "is shell syntax"),
    ("sh alone", argv("sh"), "serving.extraArgs.0", "is shell syntax"),
    ("-c", argv("-c"), "serving.extraArgs.0", "is shell syntax"),
    ("redirect", argv(">"), "serving.extraArgs.0", "is shell syntax"),
    ("substitution item", argv("$(cat /etc/args)"), "serving.extraArgs.0", "is shell syntax"),
    ("several flags", argv("--enable-prefix-caching --max-num-batched-tokens 8192"), "serving.extraArgs.0",
     "holds several arguments"),
    ("flag and value with a space", argv("--max-num-batched-tokens 8192"), "serving.extraArgs.0", "several"),
    ("trailing space", argv("--enforce-eager "), "serving.extraArgs.0", "holds several arguments"),
    ("leading space", argv(" --enforce-eager"), "serving.extraArgs.0", "starts with whitespace"),
    ("--help", argv("--help"), "serving.extraArgs.0", "print its help and exit"),
    ("-h", argv("-h"), "serving.extraArgs.0", "print its help and exit"),
    ("unknown flag, closest named", argv("--max-num-batch-tokens", "8192"), "serving.extraArgs.0",
     "is not a flag of vLLM 0.32's `vllm serve` (flags are exact, no abbreviations; the list is `vllm serve "
     "--help=all`); did you mean --max-num-batched-tokens?"),
    ("abbreviation", argv("--enable-prefix-cach"), "serving.extraArgs.0", "did you mean --enable-prefix-caching?"),
    ("single dash long flag", argv("-enforce-eager"), "serving.extraArgs.0", "did you mean --enforce-eager?"),
    ("a bare --", argv("--"), "serving.extraArgs.0", "is not a flag of vLLM 0.32"),
    ("value after a switch", argv("--enable-prefix-caching", "8192"), "serving.extraArgs",
     "serving.extraArgs[1] '8192' is a value, but '--enable-prefix-caching' takes no value"),
    ("value first", argv("8192"), "serving.extraArgs", "no flag comes before it"),
    ("second value of a one-value flag", argv("--max-num-batched-tokens", "8192", "4096"), "serving.extraArgs",
     "serving.extraArgs[2] '4096' is a value, but '8192' takes no value"),
    ("flag without its value at the end", argv("--max-num-batched-tokens"), "serving.extraArgs",
     "'--max-num-batched-tokens' needs a value: add it as the next item"),
    ("flag without its value before a flag", argv("--max-num-batched-tokens", "--enforce-eager"),
     "serving.extraArgs", "'--max-num-batched-tokens' needs a value"),
    ("many-value flag without values", argv("--allowed-media-domains", "--enable-prefix-caching"), "serving.extraArgs",
     "needs a value"),
    ("a LoRA flag is spec.lora's", argv("--enable-lora"), "serving.extraArgs.0", "spec.lora"),
    ("static adapters are spec.adapters'", argv("--lora-modules", "a=/x"), "serving.extraArgs.0", "spec.adapters"),
    ("switch with a value", argv("--enforce-eager=true"), "serving.extraArgs",
     "--enforce-eager is a switch and takes no value: write it alone to turn it on, or --no-enforce-eager"),
]


@pytest.mark.parametrize("case,spec,where,words", BAD, ids=[c[0] for c in BAD])
def test_bad_strings_are_refused_with_a_message_that_says_what_to_fix(case: str, spec: dict, where: str,
                                                                      words: str) -> None:
    loc, message = error_of(spec)
    assert loc == where, f"{case}: {loc}: {message}"
    assert words in message, f"{case}: {message}"


GOOD = [
    named("meta-llama/Llama-3.1-8B-Instruct"), named("gpt2"), named("org_1/a.b-c_d"), named("o/" + "x" * 96),
    named("x" * 96 + "/y"), named("/models/llama"), named("/models/llama/"),
    named("/root/.cache/huggingface/hub/models--org--name/snapshots/abc"),
    imaged("vllm/vllm-openai:v0.32.0"), imaged("ubuntu"), imaged("shardwise.local/vllm-cpu:0.32.0"),
    imaged("localhost/vllm"), imaged("localhost:5000/a/b:c"), imaged("registry:5000/a"), imaged("[::1]:5000/a"),
    imaged(f"ghcr.io/org/vllm:1.0@{DIGEST}"), imaged(f"org/vllm@{DIGEST}"), imaged("a__b/c--d/e.f_g:T_1.x-y"),
    imaged("vllm/vllm-openai:" + "t" * 128),
    argv(), argv("--enable-prefix-caching"), argv("--max-num-batched-tokens", "8192"),
    argv("--max-num-batched-tokens=8192"), argv("--enable_prefix_caching"), argv("--no-enable-prefix-caching"),
    argv("-O3"), argv("-O", "3"), argv("-O.mode=3"), argv("-cc.mode=3"), argv("--compilation-config.mode", "3"),
    argv("--eplb-config.window_size+", "1"), argv("--seed", "-1"), argv("--seed", "-1e3"),
    argv("--hf-token"), argv("--hf-token", "t"), argv("--hf-token", "--enforce-eager"),
    argv("--allowed-media-domains", "a.example", "b.example", "--enable-prefix-caching"), argv("--api-key", "k"),
    argv("--override-generation-config", '{"temperature": 0.5}'),
    argv("--chat-template", "{% for m in messages %}```{{ m['content'] }}```{% endfor %}"),
    argv("--model-impl=transformers"), argv("--quantization-config", "{}"), argv("-ep"),
    argv("--default-chat-template-kwargs", "a=1 && b"),  # shell-looking text inside a value is a value
]


@pytest.mark.parametrize("spec", GOOD, ids=lambda s: repr(s.get("serving") or s["model"]["name"])[:60])
def test_valid_strings_are_accepted(spec: dict) -> None:
    InferenceDeploymentSpec.model_validate(spec)


def _node(schema: dict, *path: str) -> dict:
    for key in path:
        schema = schema[key] if key == "items" else schema["properties"][key]
    return schema


def test_the_crd_carries_the_rules_the_models_run() -> None:
    spec = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for path, rules in ((("model", "name"), model_ids.CHECKS), (("serving", "image"), images.SERVING_IMAGE),
                        (("serving", "extraArgs", "items"), extra_args.ITEM_CHECKS)):
        node = _node(spec, *path)
        assert node["x-kubernetes-validations"] == checks.cel_rules(rules), path
        # A bound on every checked string: without one, the CEL cost estimate exceeds the budget.
        assert node["maxLength"] <= 1024, path
    assert _node(spec, "serving", "extraArgs")["maxItems"] == 128


def test_each_cel_rule_stands_aside_when_an_earlier_check_failed() -> None:
    first, second = checks.Check(message="a", bad="x"), checks.Check(message="b", good="y")
    rules = checks.cel_rules([first, second])
    assert rules[0]["rule"] == "!(self.matches('x'))"
    assert rules[1]["rule"] == "self.matches('x') || !(!self.matches('^(?:y)$'))"
    assert checks.first_problem([first, second], "x") == "a"  # not both, as the API server too
    assert checks.first_problem([first, second], "z") == "b"
    assert checks.first_problem([first, second], "y") is None


def test_whole_value_patterns_do_not_stop_before_a_final_newline() -> None:
    # Python's `$` matches before a final newline, RE2's does not: the rules must read alike.
    assert checks.Check(message="m", good="y").fails("y\n")
    assert not checks.Check(message="m", bad_whole="y").fails("y\n")


def test_patterns_keep_to_ascii_classes() -> None:
    # `\w`, `\s`, `\d` are Unicode in Python and ASCII in RE2: the two sides would disagree.
    for rules in (model_ids.CHECKS, images.SERVING_IMAGE, extra_args.ITEM_CHECKS):
        for check in rules:
            for pattern in (check.bad, check.bad_whole, check.good, check.only_if):
                assert pattern is None or not re.search(r"\\[wsdWSD]", pattern), pattern


def _shipped_specs() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")) + sorted((ROOT / "tests/fixtures/deployments").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "InferenceDeployment":
                found.append((path.name, doc["spec"]))
    return found


def test_every_shipped_example_and_fixture_passes_the_offline_rules() -> None:
    specs = _shipped_specs()
    assert len(specs) >= 10
    refused = {}
    for name, spec in specs:
        try:
            InferenceDeploymentSpec.model_validate(spec)
        except pydantic.ValidationError as error:
            refused[name] = str(error)
    assert refused == {}
