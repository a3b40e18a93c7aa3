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


def test_the_planner_counts_the_adapter_slots_and_says_so() -> None:
    from shardwise.planner import memory, models
    from shardwise.planner.request import request_from_spec

    arch = models.lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    # A rank-64 slot on every linear layer of Llama-3.1-8B, unsharded, an A and a B per projection
    # as vLLM stacks them: 32 x 64 x 2 B x (in + out: q 4096+4096, k and v 4096+1024 each, o
    # 4096+4096, gate and up 4096+14336 each, down 14336+4096 = 81,920), 336 MB; the MLP width
    # read from the parameter count is a little wide.
    one = memory.lora_bytes_per_gpu(arch, 1, 64, tp=1, pp=1)
    assert 1.0 <= one / (32 * 64 * 2 * 81920) < 1.15
    assert memory.lora_bytes_per_gpu(arch, 4, 64, tp=1, pp=1) == 4 * one
    assert memory.lora_bytes_per_gpu(arch, 1, 64, tp=4, pp=1) < one  # the sharded halves split
    assert memory.lora_bytes_per_gpu(arch, 0, 64, tp=1, pp=1) == 0
    request = request_from_spec({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "lora": {"maxLoras": 8},
                                 "adapters": [hub("sql", 64)]})
    assert (request.lora_slots, request.lora_rank) == (8, 64)
    assert request_from_spec({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}).lora_slots == 0
