"""The dispatcher's decisions with its clock in the test's hands: pick, hold, release, expire, wake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shardwise.gateway.decide import holding, routes
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.decide.openai_errors import Refusal


def table(**models: tuple[tuple[str, ...], bool]) -> routes.Table:
    return routes.Table(routes={m: routes.Route(model=m, namespace="ns", name=m, endpoints=eps, scale_to_zero=zero,
                                                desired_replicas=0) for m, (eps, zero) in models.items()})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(limits: holding.Limits = holding.Limits(timeout_s=60)) -> tuple[Dispatcher, Clock, list[str]]:
    clock, woken = Clock(), []
    dispatcher = Dispatcher(limits, on_wake=lambda route: woken.append(route.model), clock=clock)
    dispatcher.synced.set()
    return dispatcher, clock, woken


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_ready_model_gets_an_endpoint_and_counts_outstanding() -> None:
    async def main() -> None:
        dispatcher, _, _ = make()
        dispatcher.set_table(table(m=(("10.0.0.1:8000", "10.0.0.2:8000"), False)))
        first = await dispatcher.choose("m", 10, None)
        second = await dispatcher.choose("m", 10, None)
        assert {first, second} == {"10.0.0.1:8000", "10.0.0.2:8000"}  # least outstanding
        dispatcher.done(first)
        assert dispatcher.outstanding == {second: 1}
    run(main())


@pytest.mark.parametrize("models, model, status", [
    ({}, "x", 404),
    ({"m": ((), False)}, "m", 503),  # no replicas and may not scale from zero
])
def test_refusals(models, model, status) -> None:
    async def main() -> None:
        dispatcher, _, _ = make()
        dispatcher.set_table(table(**models))
        result = await dispatcher.choose(model, 1, None)
        assert isinstance(result, Refusal) and result.status == status
    run(main())


def test_held_until_an_endpoint_is_ready_fifo_with_one_wake() -> None:
    async def main() -> None:
        dispatcher, _, woken = make()
        dispatcher.set_table(table(z=((), True)))
        waiting = [asyncio.create_task(dispatcher.choose("z", 1, None)) for _ in range(3)]
        await asyncio.sleep(0)
        assert dispatcher.holds.count("z") == 3 and woken == ["z"]
        dispatcher.tick()  # within the wake interval: no second signal
        assert woken == ["z"]
        dispatcher.set_table(table(z=(("10.0.0.9:8000",), True)))
        assert await asyncio.gather(*waiting) == ["10.0.0.9:8000"] * 3
        assert dispatcher.holds.count("z") == 0
    run(main())


def test_queue_full_is_429_and_timeout_is_503() -> None:
    async def main() -> None:
        dispatcher, clock, _ = make(holding.Limits(max_count=1, max_bytes=100, timeout_s=60))
        dispatcher.set_table(table(z=((), True)))
        held = asyncio.create_task(dispatcher.choose("z", 1, None))
        await asyncio.sleep(0)
        full = await dispatcher.choose("z", 1, None)
        assert full.status == 429 and dict(full.headers)["retry-after"] == "5"
        clock.now = 59.0
        dispatcher.tick()
        assert not held.done()
        clock.now = 60.0
        dispatcher.tick()
        timed_out = await held
        assert timed_out.status == 503 and "retry-after" in dict(timed_out.headers)
    run(main())


def test_a_client_that_leaves_frees_its_place() -> None:
    async def main() -> None:
        dispatcher, _, _ = make(holding.Limits(max_count=1, max_bytes=100, timeout_s=60))
        dispatcher.set_table(table(z=((), True)))
        held = asyncio.create_task(dispatcher.choose("z", 1, None))
        await asyncio.sleep(0)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert dispatcher.holds.count("z") == 0
    run(main())


def test_shutdown_answers_every_held_request() -> None:
    async def main() -> None:
        dispatcher, _, _ = make()
        dispatcher.set_table(table(z=((), True)))
        held = asyncio.create_task(dispatcher.choose("z", 1, None))
        await asyncio.sleep(0)
        dispatcher.shutdown()
        assert (await held).status == 503
        assert (await dispatcher.choose("z", 1, None)).status == 503
    run(main())


def test_nothing_is_routed_before_the_caches_synced() -> None:
    async def main() -> None:
        dispatcher = Dispatcher(holding.Limits(timeout_s=60))
        pending = asyncio.create_task(dispatcher.choose("m", 1, None))
        await asyncio.sleep(0.01)
        assert not pending.done()
        dispatcher.set_table(table(m=(("10.0.0.1:8000",), False)))
        dispatcher.synced.set()
        assert await pending == "10.0.0.1:8000"
    run(main())


def test_an_adapter_that_cannot_load_is_refused_at_once_with_its_reason_and_no_retry_after() -> None:
    async def main() -> None:
        dispatcher, _, woken = make()
        adapter = routes.Route(model="big", namespace="ns", name="m", endpoints=(), scale_to_zero=False,
                               desired_replicas=1, base="m", unavailable="rank 16 is above maxLoraRank 8")
        dispatcher.set_table(routes.Table(routes={"big": adapter}))
        result = await dispatcher.choose("big", 1, None)
        assert isinstance(result, Refusal) and result.status == 503
        assert b"rank 16 is above maxLoraRank 8" in result.body and b"adapter_unavailable" in result.body
        assert not any(name.lower() == "retry-after" for name, _ in result.headers)
        assert woken == [] and dispatcher.holds.count("big") == 0
    run(main())
