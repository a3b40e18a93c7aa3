"""Spill-over while waking: the share arithmetic and what a deployment's spec.spillover reads as."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from shardwise.gateway.decide import routes, spillover
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.service.spillover import Spill


def test_the_first_request_of_a_spell_spills_and_the_share_converges_on_max_share() -> None:
    for share in (0.1, 0.3, 0.5, 1.0):
        spell = spillover.Spell()
        decisions = [spillover.admit(spell, share) for _ in range(100)]
        assert decisions[0] is True
        assert abs(sum(decisions) - share * 100) <= 1
        assert all(sum(decisions[:n]) <= -(-share * n // 1) for n in range(1, 101))  # never above ceil(share x n)


def test_spec_reads_as_a_namespaced_target_and_nonsense_as_none() -> None:
    assert spillover.of({"provider": "acme", "model": "m", "maxShare": 0.3}, "ns") == \
        spillover.Spillover("ns/acme", "m", 0.3)
    for bad in (None, {}, {"provider": "acme"}, {"provider": "acme", "model": "m", "maxShare": 0},
                {"provider": "acme", "model": "m", "when": ["Overloaded"]}, {"provider": "a", "model": "m", "maxShare": "x"}):
        assert spillover.of(bad, "ns") is None


def _route(endpoints: tuple[str, ...]) -> routes.Route:
    return routes.Route(model="local", namespace="ns", name="local", endpoints=endpoints, scale_to_zero=True,
                        desired_replicas=0, spillover=spillover.Spillover("ns/acme", "hosted", 0.5))


def test_spill_only_while_waking_within_the_share_and_the_wake_signal_still_written() -> None:
    async def run() -> None:
        woken: list[str] = []
        dispatcher = Dispatcher(on_wake=lambda r: woken.append(r.model))
        hosted = SimpleNamespace(model="hosted", provider="ns/acme")
        book = SimpleNamespace(get=lambda name: hosted if name == "hosted" else None)
        spill = Spill(dispatcher, book)
        dispatcher.set_table(routes.Table(routes={"local": _route(())}))
        assert [spill.target("local") is hosted for _ in range(4)] == [True, False, True, False]
        assert woken == ["local"]  # at once, then spaced by the wake interval
        dispatcher.set_table(routes.Table(routes={"local": _route(("10.0.0.1:8000",))}))
        assert spill.target("local") is None  # Ready: the engines'
        dispatcher.set_table(routes.Table(routes={"local": _route(())}))
        assert spill.target("local") is hosted  # a new spell starts its count again
        other = SimpleNamespace(get=lambda name: SimpleNamespace(model="hosted", provider="ns/other"))
        assert Spill(dispatcher, other).target("local") is None  # the name is another Provider's: held
    asyncio.run(run())
