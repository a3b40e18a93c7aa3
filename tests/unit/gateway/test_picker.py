"""Least load, engine weighting, CHWBL prefix affinity with its bound, determinism."""

from __future__ import annotations

import collections

import pytest

from shardwise.gateway.decide import picker
from shardwise.gateway.decide.picker import EngineStats

E = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]


@pytest.mark.parametrize("outstanding, stats, expected", [
    ({E[0]: 2, E[1]: 1, E[2]: 3}, {}, E[1]),
    ({}, {E[0]: EngineStats(waiting=3), E[1]: EngineStats(waiting=1), E[2]: EngineStats(waiting=2)}, E[1]),
    ({E[0]: 1, E[1]: 1, E[2]: 1}, {E[1]: EngineStats(kv_cache_usage=0.9)}, E[0]),
    # a waiting queue (other gateways' requests) outweighs our own lower count
    ({E[0]: 0, E[1]: 1, E[2]: 1}, {E[0]: EngineStats(waiting=5)}, E[1]),
], ids=["outstanding", "waiting", "kv-cache", "queue-beats-count"])
def test_least_loaded(outstanding, stats, expected) -> None:
    assert picker.pick(E, outstanding=outstanding, stats=stats, prefix=None) == expected


def test_ties_rotate_with_the_sequence_number() -> None:
    picks = [picker.pick(E, outstanding={}, stats={}, prefix=None, seq=s) for s in range(6)]
    assert picks == sorted(E) * 2


def test_same_prefix_same_endpoint_whatever_the_order() -> None:
    first = picker.pick(E, outstanding={}, stats={}, prefix="system: you are helpful")
    assert all(picker.pick(order, outstanding={}, stats={}, prefix="system: you are helpful") == first
               for order in (E[::-1], [E[1], E[0], E[2]]))


def test_prefixes_spread_over_the_ring() -> None:
    counts = collections.Counter(picker.pick(E, outstanding={}, stats={}, prefix=f"conversation {i}")
                                 for i in range(300))
    assert set(counts) == set(E) and min(counts.values()) > 60


def test_the_bound_moves_a_hot_prefix_to_the_next_endpoint() -> None:
    home = picker.pick(E, outstanding={}, stats={}, prefix="hot")
    # home holds 3 of 3 outstanding: capacity ceil(1.25 * 4 / 3) = 2, so 3 + 1 > 2
    moved = picker.pick(E, outstanding={home: 3}, stats={}, prefix="hot")
    assert moved != home
    # within the bound it stays home: 1 + 1 <= ceil(1.25 * (1 + 1 + 1 + 1) / 3) = 2
    others = [e for e in E if e != home]
    assert picker.pick(E, outstanding={home: 1, others[0]: 1, others[1]: 1}, stats={}, prefix="hot") == home


def test_load_stays_bounded_under_one_prefix() -> None:
    outstanding: dict[str, int] = {}
    for _ in range(30):
        chosen = picker.pick(E, outstanding=outstanding, stats={}, prefix="everyone shares this")
        outstanding[chosen] = outstanding.get(chosen, 0) + 1
    mean = 30 / 3
    assert max(outstanding.values()) <= 1.25 * mean + 1


def test_removing_an_endpoint_moves_only_its_prefixes() -> None:
    prefixes = [f"p{i}" for i in range(200)]
    before = {p: picker.pick(E, outstanding={}, stats={}, prefix=p) for p in prefixes}
    after = {p: picker.pick(E[:2], outstanding={}, stats={}, prefix=p) for p in prefixes}
    assert all(after[p] == before[p] for p in prefixes if before[p] != E[2])


@pytest.mark.parametrize("body, expected", [
    ({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}, "system:S\nuser:U\n"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "T"}, {"type": "image_url"}]}]},
     "user:T\n"),
    ({"prompt": "hello"}, "hello"),
    ({"prompt": ["first", "second"]}, "first"),
    ({"prompt": [1, 2, 3]}, None),
    ({"input": "embed me"}, None),
    ({"prompt": "x" * 1000}, "x" * picker.PREFIX_CHARS),
], ids=["messages", "multimodal", "prompt", "prompt-list", "token-ids", "embeddings", "truncated"])
def test_prefix_of(body, expected) -> None:
    assert picker.prefix_of(body) == expected


def test_no_endpoints_is_an_error() -> None:
    with pytest.raises(ValueError):
        picker.pick([], outstanding={}, stats={}, prefix=None)
