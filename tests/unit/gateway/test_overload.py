"""overload.spared: which engines the fast path spares for queueing far beyond their peers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shardwise.gateway.decide import overload, picker, routes

A, B, C = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"


def _route(model: str, endpoints: tuple[str, ...], **extra) -> routes.Route:
    return routes.Route(model=model, namespace="ns", name=model, endpoints=endpoints, scale_to_zero=False,
                        desired_replicas=len(endpoints), **extra)


TABLE = routes.Table(routes={"llama": _route("llama", (A, B, C))})


def _stats(waiting: float, kv: float = 0.0) -> picker.EngineStats:
    return picker.EngineStats(waiting=waiting, kv_cache_usage=kv)


def test_an_engine_queueing_far_beyond_its_peers_is_spared() -> None:
    stats = {A: _stats(12, 0.9), B: _stats(0, 0.3), C: _stats(0, 0.2)}
    assert overload.spared(TABLE, stats) == {("llama", A)}


def test_engines_that_queue_alike_are_all_left_alone() -> None:
    stats = {A: _stats(6, 0.9), B: _stats(5, 0.9), C: _stats(7, 0.95)}
    assert overload.spared(TABLE, stats) == set()


def test_a_full_cache_without_a_queue_is_not_overload() -> None:
    # KV-cache use alone weighs at most KV_WEIGHT: high, but no request waits yet.
    stats = {A: _stats(0, 1.0), B: _stats(0, 0.0), C: _stats(0, 0.0)}
    assert overload.spared(TABLE, stats) == set()


def test_a_spared_engine_stays_spared_until_it_is_back_to_the_mean() -> None:
    entered = overload.spared(TABLE, {A: _stats(12), B: _stats(0), C: _stats(0)})
    assert entered == {("llama", A)}
    # Below the bound to enter (1.25 x mean + 1 = 6), still above the mean (4): stays.
    draining = {A: _stats(5), B: _stats(4), C: _stats(3)}
    assert overload.spared(TABLE, draining) == set()
    assert overload.spared(TABLE, draining, entered) == {("llama", A)}
    assert overload.spared(TABLE, {A: _stats(3), B: _stats(3), C: _stats(3)}, entered) == set()


def test_an_engine_without_a_scrape_is_never_spared_and_a_lone_one_neither() -> None:
    assert overload.spared(TABLE, {A: _stats(12)}) == set()  # no peer read: nothing to compare with
    lone = routes.Table(routes={"solo": _route("solo", (A,))})
    assert overload.spared(lone, {A: _stats(50)}) == set()
    # peers read, the overloaded one not: unknown is healthy
    assert overload.spared(TABLE, {B: _stats(0), C: _stats(40)}) == {("llama", C)}


def test_an_engine_is_spared_for_the_models_whose_other_engines_can_take_its_requests() -> None:
    table = routes.Table(routes={"llama": _route("llama", (A, B)),
                                 "sql-lora": _route("sql-lora", (A,), base="llama")})
    # The adapter is loaded on A alone: A keeps its requests, the base model's go to B.
    assert overload.spared(table, {A: _stats(10), B: _stats(0)}) == {("llama", A)}


@given(st.lists(st.tuples(st.integers(0, 64), st.floats(0, 1)), min_size=1, max_size=8),
       st.sets(st.integers(0, 7)))
def test_no_model_ever_has_every_engine_spared(loads: list[tuple[int, float]], before: set[int]) -> None:
    endpoints = tuple(f"10.1.0.{i}:8000" for i in range(len(loads)))
    table = routes.Table(routes={"m": _route("m", endpoints)})
    stats = {e: _stats(w, kv) for e, (w, kv) in zip(endpoints, loads)}
    previous = frozenset(("m", endpoints[i]) for i in before if i < len(endpoints))
    marked = overload.spared(table, stats, previous)
    assert len(marked) < len(endpoints)
    assert all(model == "m" and (stats[e].waiting >= 1 or (model, e) in previous) for model, e in marked)
