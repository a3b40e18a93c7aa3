"""spec.engine's argument lists (api/engines.py): the CRD carries each engine's item rules, the
owned flags are refused in every spelling the engine's parser takes, and none of the engine's
other flags is caught by them."""

from __future__ import annotations

import re

import pytest
from shardwise.api import checks, crd, engine_flags, engines


def _items(field: str) -> dict:
    spec = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec["properties"]["serving"]["properties"][field]


@pytest.mark.parametrize("args", [engines.SGLANG, engines.TRTLLM], ids=["sglang", "trtllm"])
def test_the_crd_carries_each_engines_item_rules(args: engines.EngineArgs) -> None:
    field = args.field.split(".")[-1]
    node = _items(field)
    assert node["maxItems"] == 128 and node["items"]["maxLength"] <= 1024
    assert node["items"]["x-kubernetes-validations"] == checks.cel_rules(args.item_checks)
    for check in args.item_checks:
        for pattern in (check.bad, check.bad_whole, check.good, check.only_if):
            assert pattern is None or not re.search(r"\\[wsdWSD]", pattern), pattern


@pytest.mark.parametrize("args", [engines.SGLANG, engines.TRTLLM], ids=["sglang", "trtllm"])
def test_owned_flags_only(args: engines.EngineArgs) -> None:
    known = args.known()
    assert args.owned and all(args.is_owned(o) and args.item_problem(o) == args.owned_message for o in args.owned)
    free = [f for f in known if f not in args.owned and f not in ("-h", "--help")]
    assert free and [f for f in free if args.item_problem(f) is not None] == []


def test_sglang_prefixes_of_owned_flags_are_owned_but_trtllm_takes_exact_spellings() -> None:
    assert engines.SGLANG.is_owned("--tp-si") and engines.SGLANG.is_owned("--mem-fraction")
    assert not engines.TRTLLM.is_owned("--tp_si")
    assert engines.TRTLLM.item_problem("--tp_si") is not None  # unknown to click instead


def test_every_flag_the_renderers_set_is_owned() -> None:
    from shardwise.render import sglang_args, trtllm_args
    from shardwise.api.v1alpha1 import InferenceDeploymentSpec
    plan = {"tensorParallel": 4, "pipelineParallel": 2, "dataParallel": 2, "expertParallel": 8,
            "nodesPerReplica": 2, "weights": {"quantization": "fp8"}}
    for args, argv in (
        (engines.SGLANG, sglang_args.build_args(InferenceDeploymentSpec.model_validate(
            {"engine": "sglang", "model": {"name": "m/x", "revision": "r"}}), plan, "m")),
        (engines.TRTLLM, trtllm_args.build_args(InferenceDeploymentSpec.model_validate(
            {"engine": "trtllm", "model": {"name": "m/x", "revision": "r"}}), plan)),
    ):
        rendered = {a for a in argv if a.startswith("--")}
        assert rendered <= set(args.known())
        assert [f for f in rendered if not args.is_owned(f)] == []


def test_the_trtllm_copy_says_where_it_comes_from() -> None:
    assert "tensorrt_llm/commands/serve.py" in engine_flags.source("trtllm")
    assert "sglang 0.5.23" in engine_flags.source("sglang")


def test_sglang_flags_are_the_captured_help() -> None:
    from pathlib import Path

    from shardwise.api import vllm_flags
    help_text = (Path(__file__).parents[2] / "fixtures" / "sglang-0.5.23" / "serve-help.txt").read_text()
    assert engine_flags.sglang() == vllm_flags.parse_help(help_text)
