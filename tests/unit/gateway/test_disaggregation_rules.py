"""The P/D split's pure rules: which requests prefill on a prefill engine, which one, the two legs'
bodies (vLLM's toy proxy protocol), the decode engines' prefix memory, and the table they read."""

from __future__ import annotations

from typing import Any

import pytest

from shardwise.gateway.dataplane import fastpath
from shardwise.gateway.decide import disaggregation as pd
from shardwise.gateway.decide import routes

LONG = "The quarterly report covers revenue, costs and the outlook for next year. " * 40  # ~750 tokens


def test_the_prefill_leg_asks_for_one_token_and_a_remote_decode() -> None:
    body = {"model": "m", "prompt": LONG, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": 200, "max_completion_tokens": 200, "min_tokens": 5, "temperature": 0}
    leg = pd.prefill_body(body)
    assert leg["kv_transfer_params"] == {"do_remote_decode": True, "do_remote_prefill": False,
                                         "remote_engine_id": None, "remote_block_ids": None,
                                         "remote_host": None, "remote_port": None}
    assert (leg["stream"], leg["max_tokens"], leg["max_completion_tokens"]) == (False, 1, 1)
    assert not {"stream_options", "min_tokens"} & set(leg)
    assert (leg["prompt"], leg["temperature"]) == (LONG, 0)
    assert body["max_tokens"] == 200 and body["stream"] is True  # the client's body is left alone
    assert "max_completion_tokens" not in pd.prefill_body({"model": "m", "prompt": LONG})


def test_the_decode_leg_is_the_clients_body_with_the_returned_params() -> None:
    answer = {"choices": [], "kv_transfer_params": {"do_remote_prefill": True, "remote_host": "10.0.0.7",
                                                    "remote_block_ids": [1, 2]}}
    params = pd.kv_params_of(answer)
    body = {"model": "m", "prompt": LONG, "stream": True, "max_tokens": 200}
    assert pd.decode_body(body, params) == {**body, "kv_transfer_params": answer["kv_transfer_params"]}
    assert pd.kv_params_of({"kv_transfer_params": None}) is None  # the example connector's answer
    assert pd.kv_params_of(["not", "an", "object"]) is None


@pytest.mark.parametrize("path, prompt_tokens, cached, prefill, expected", [
    ("/v1/completions", 1000, 0, ("p:8000",), None),
    ("/v1/chat/completions", 1000, 0, ("p:8000",), None),
    ("/v1/embeddings", 1000, 0, ("p:8000",), pd.NOT_GENERATION),
    ("/v1/completions", 1000, 0, (), pd.NO_PREFILL_ENGINE),
    ("/v1/completions", 100, 0, ("p:8000",), pd.SHORT),
    ("/v1/completions", 1000, 900, ("p:8000",), pd.CACHED),  # 100 new tokens: decode computes them
    ("/v1/completions", 1000, 700, ("p:8000",), None),  # 300 new tokens: still worth the hand-off
])
def test_which_requests_split(path: str, prompt_tokens: int, cached: int, prefill: tuple[str, ...],
                              expected: str | None) -> None:
    assert pd.whole_on_decode(path, prompt_tokens, cached, prefill, min_prompt_tokens=256) == expected


def test_the_threshold_is_the_callers() -> None:
    assert pd.whole_on_decode("/v1/completions", 100, 0, ("p",), min_prompt_tokens=64) is None
    assert pd.whole_on_decode("/v1/completions", 100, 0, ("p",), min_prompt_tokens=101) == pd.SHORT


def test_prompt_text_reads_both_shapes() -> None:
    chat = {"messages": [{"role": "system", "content": "be terse"},
                         {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url"}]}]}
    assert pd.prompt_text(chat) == "system:be terse\nuser:hello\n"
    assert pd.prompt_text({"prompt": ["a", "b", 3]}) == "ab"
    assert pd.prompt_text({"prompt": 7}) == ""
    assert pd.estimated_tokens("x" * 1001) == 251


def test_a_decode_engine_remembers_the_prompts_it_was_sent() -> None:
    memory = pd.PrefixMemory()
    first = pd.block_hashes(LONG)
    assert len(first) == len(LONG) // pd.BLOCK_CHARS
    assert memory.matched("d1:8000", first) == 0
    memory.record("d1:8000", first)
    assert memory.matched("d1:8000", first) == len(first)
    assert memory.matched("d2:8000", first) == 0  # another engine holds nothing of it
    follow_up = pd.block_hashes(LONG + "And what about the risks? " * 30)
    assert memory.matched("d1:8000", follow_up) == len(first)  # the conversation's earlier turn
    other_start = pd.block_hashes("Different system prompt. " + LONG)
    assert memory.matched("d1:8000", other_start) == 0  # a block means its whole prefix, as in vLLM


def test_the_memory_is_bounded_per_engine() -> None:
    memory = pd.PrefixMemory(blocks_per_engine=4)
    old, new = pd.block_hashes("a" * 4 * pd.BLOCK_CHARS), pd.block_hashes("b" * 4 * pd.BLOCK_CHARS)
    memory.record("d:8000", old)
    memory.record("d:8000", new)
    assert (memory.matched("d:8000", old), memory.matched("d:8000", new)) == (0, 4)
    memory.retain(set())
    assert memory.matched("d:8000", new) == 0


NODES = {"d1:8000": "node-a", "p1:8000": "node-a", "p2:8000": "node-b", "p3:8000": "node-b"}


def test_a_prefill_engine_on_the_decode_engines_node_is_preferred_within_the_bound() -> None:
    prefill = ("p1:8000", "p2:8000", "p3:8000")
    idle = {e: 0.0 for e in prefill}
    assert pd.pick_prefill(prefill, "d1:8000", NODES, {**idle, "p1:8000": 1.0}) == "p1:8000"  # busier, but near
    # far beyond its peers: the KV crosses nodes rather than queueing there
    assert pd.pick_prefill(prefill, "d1:8000", NODES, {**idle, "p1:8000": 6.0}) in ("p2:8000", "p3:8000")
    # no node known: least loaded
    assert pd.pick_prefill(prefill, "d9:8000", NODES, {"p1:8000": 2.0, "p2:8000": 1.0, "p3:8000": 0.0}) == "p3:8000"
    with pytest.raises(ValueError):
        pd.pick_prefill((), "d1:8000", NODES, {})


def _pod(owner: str, ip: str, role: str | None, node: str | None = None, ready: bool = True) -> dict[str, Any]:
    labels = {routes.INSTANCE_LABEL: owner, **({routes.ROLE_LABEL: role} if role else {})}
    return {"metadata": {"name": f"{owner}-{ip}", "namespace": "a", "labels": labels},
            "spec": {"nodeName": node} if node else {},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _infd(name: str, adapters: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"model": {"name": "org/m"}, "adapters": [{"name": a} for a in adapters]}, "status": {}}


def test_the_table_carries_ready_prefill_engines_and_nodes_and_the_fast_path_leaves_the_pair() -> None:
    pods = [_pod("pd", "10.0.0.1", "prefill", "node-a"), _pod("pd", "10.0.0.2", "decode", "node-a"),
            _pod("pd", "10.0.0.3", "prefill", "node-b", ready=False), _pod("agg", "10.0.0.9", None, "node-c")]
    table = routes.build_table([_infd("pd", adapters=("sql",)), _infd("agg")], pods)
    pair = table.get("pd")
    assert pair.endpoints == ("10.0.0.2:8000",)
    assert pair.prefill_endpoints == ("10.0.0.1:8000",)
    assert dict(pair.nodes) == {"10.0.0.1:8000": "node-a", "10.0.0.2:8000": "node-a"}
    assert table.get("sql").prefill_endpoints == ()  # an adapter: decode does both
    assert table.get("agg").prefill_endpoints == ()
    assert [r.model for r in fastpath.fast_models(table)] == ["agg"]  # the pair takes the picker
    # its prefill engines gone: decode-only, back on the fast path
    alone = routes.build_table([_infd("pd")], [p for p in pods if "prefill" not in str(p["metadata"]["labels"])])
    assert alone.get("pd").prefill_endpoints == () and [r.model for r in fastpath.fast_models(alone)] == ["pd"]
