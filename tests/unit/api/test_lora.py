"""spec.adapters and spec.lora: what admission refuses, the limits the engines start with, and
the flags and environment they are rendered as."""

from __future__ import annotations

import pydantic
import pytest

from shardwise.api import lora
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import pod, vllm_args

PLAN = {"tensorParallel": 1, "pipelineParallel": 1, "gpusPerNode": 1}


def spec(**fields) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"name": "org/base"}, **fields})


def hub(name: str, rank: int | None = None, **source) -> dict:
    return {"name": name, "source": source or {"repo": f"org/{name}"}, **({"rank": rank} if rank else {})}


@pytest.mark.parametrize("adapters,words", [
    ([hub("a"), hub("a")], "each adapter needs a name of its own"),
    ([{"name": "a", "source": {}}], "exactly one of them"),
    ([{"name": "a", "source": {"repo": "org/a", "path": "a"}}], "exactly one of them"),
    ([{"name": "a", "source": {"path": "a", "revision": "v1"}}], "needs source.repo"),
    ([{"name": "a", "source": {"path": "loras/../../etc"}}], "'..' may not appear"),
    ([{"name": "a", "source": {"repo": "org/a--b"}}], "'--' or '..'"),
    ([{"name": " a", "source": {"repo": "org/a"}}], "name"),
    ([{"name": "a", "source": {"repo": "https://huggingface.co/org/a"}}], "repo"),
])
def test_bad_adapters_are_refused(adapters: list, words: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=words):
        spec(adapters=adapters)


def test_an_adapter_may_not_take_the_base_models_served_name() -> None:
    with pytest.raises(pydantic.ValidationError, match="served name"):
        InferenceDeploymentSpec.model_validate({"model": {"name": "org/base", "servedName": "sql"},
                                                "adapters": [hub("sql")]})


def test_no_lora_without_adapters_or_spec_lora() -> None:
    plain = spec()
    assert lora.limits(plain) is None and lora.serve_flags(plain) == []
    assert lora.RUNTIME_UPDATES_ENV not in pod._env(plain)


def test_defaults_fit_every_known_rank_and_a_set_limit_is_kept() -> None:
    assert lora.limits(spec(adapters=[hub("a")])) == lora.Limits(16, 4, None)
    assert lora.limits(spec(adapters=[hub("a", 8), hub("b", 48)])).max_rank == 64
    assert lora.limits(spec(adapters=[hub("a", 600 // 2)])).max_rank == 320
    kept = spec(adapters=[hub("a", 64)], lora={"maxLoraRank": 16, "maxLoras": 2, "maxCpuLoras": 8})
    assert lora.limits(kept) == lora.Limits(16, 2, 8)  # the adapter is refused on the engine instead
    with pytest.raises(pydantic.ValidationError):
        spec(lora={"maxLoraRank": 24})  # not a rank vLLM accepts


def test_the_flags_and_the_runtime_switch() -> None:
    one = spec(lora={}, adapters=[hub("a", 32)])
    args = vllm_args.build_serve_args(one, PLAN, "x")
    assert args[args.index("--enable-lora"):args.index("--enable-lora") + 5] == \
        ["--enable-lora", "--max-lora-rank", "32", "--max-loras", "4"]
    assert "--lora-modules" not in args  # adapters are loaded at runtime, never in the template
    assert lora.RUNTIME_UPDATES_ENV in pod._env(one)


def test_adding_an_adapter_within_the_limits_changes_no_argument() -> None:
    before = spec(lora={}, adapters=[hub("a", 8)])
    after = spec(lora={}, adapters=[hub("a", 8), hub("b", 16), hub("c")])
    assert vllm_args.build_serve_args(before, PLAN, "x") == vllm_args.build_serve_args(after, PLAN, "x")
    assert pod._env(before) == pod._env(after)
