"""The pure latency model: slower with a fuller batch and a longer prompt."""

from __future__ import annotations

import pytest
from shardwise_runtime.sim.latency import LatencyModel

MODEL = LatencyModel(ttft_s=0.2, itl_s=0.02, max_concurrency=9, reference_prompt_tokens=500)


def test_alone_it_predicts_what_it_was_given() -> None:
    assert MODEL.itl(1) == pytest.approx(0.02)
    assert MODEL.prefill_s(500, 1) == pytest.approx(0.2)
    assert MODEL.ttft(500, 1) == pytest.approx(0.2)


@pytest.mark.parametrize("running, factor", [(0, 1.0), (1, 1.0), (5, 1.5), (9, 2.0), (50, 2.0)])
def test_batch_slows_steps_linearly_up_to_a_full_batch(running: int, factor: float) -> None:
    assert MODEL.batch_factor(running) == pytest.approx(factor)
    assert MODEL.itl(running) == pytest.approx(0.02 * factor)


def test_latency_rises_with_load() -> None:
    itls = [MODEL.itl(running) for running in range(1, 10)]
    ttfts = [MODEL.ttft(100, running) for running in range(1, 10)]
    assert itls == sorted(itls) and itls[0] < itls[-1]
    assert ttfts == sorted(ttfts) and ttfts[0] < ttfts[-1]


def test_prefill_scales_with_prompt_around_a_fixed_part() -> None:
    assert MODEL.prefill_s(0, 1) == pytest.approx(0.1)
    assert MODEL.prefill_s(1000, 1) == pytest.approx(0.3)


def test_queue_wait_adds_to_ttft() -> None:
    assert MODEL.ttft(500, 1, queue_wait_s=0.7) == pytest.approx(0.9)


def test_single_slot_engine_has_no_batch_effect() -> None:
    model = LatencyModel(ttft_s=0.1, itl_s=0.01, max_concurrency=1)
    assert model.itl(1) == model.itl(5) == pytest.approx(0.01)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttft_s": -1.0},
        {"max_concurrency": 0},
        {"prompt_fixed_fraction": 1.5},
        {"batch_slowdown": -0.1},
    ],
)
def test_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LatencyModel(**{"ttft_s": 0.1, "itl_s": 0.01, "max_concurrency": 4, **kwargs})
