"""The step-level performance model's shape: load, prompt length, MoE, precision and floors."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise.planner import gpus, models, performance


def _arch(name: str) -> models.ModelArch:
    arch = models.lookup_model(name)
    assert arch is not None
    return arch


def _hw(product: str = "NVIDIA-H100-80GB-HBM3", link: performance.Link | None = None) -> performance.Hardware:
    gpu = gpus.lookup_gpu(product)
    link = link or (performance.nvlink(gpu.nvlink_gbps) if gpu.nvlink_gbps else performance.pcie(gpu.pcie_gbps))
    return performance.Hardware(
        memory_bandwidth_gbps=gpu.memory_bandwidth_gbps, bf16_tflops=gpu.bf16_tflops,
        fp8_tflops=gpu.fp8_tflops, family=gpu.family, tp_link=link, stage_link=link, inter_node_hops=0,
    )


def _work(name: str = "meta-llama/Llama-3.1-70B-Instruct", **changes: object) -> performance.Workload:
    base = performance.Workload(
        arch=_arch(name), bytes_per_weight=2.0, max_model_len=8192, max_concurrency=256,
        kv_capacity_tokens=2e6, batched_tokens=8192,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


LOADS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@pytest.mark.parametrize("tp,pp", [(1, 1), (4, 1), (2, 2), (1, 4)])
def test_latency_and_throughput_grow_with_concurrency(tp: int, pp: int) -> None:
    hw = _hw()
    predictions = [performance.predict(_work(concurrency=c), hw, tp, pp) for c in LOADS]
    for lighter, heavier in zip(predictions, predictions[1:], strict=False):
        assert heavier.itl_s >= lighter.itl_s
        assert heavier.ttft_s >= lighter.ttft_s
        assert heavier.tokens_per_s >= lighter.tokens_per_s * 0.999


def test_latency_grows_with_request_rate_until_saturation() -> None:
    hw = _hw()
    rates = (0.1, 0.5, 1, 2, 4, 8, 16, 64)
    predictions = [performance.predict(_work(request_rate=r), hw, 4, 1) for r in rates]
    for lighter, heavier in zip(predictions, predictions[1:], strict=False):
        assert heavier.ttft_s >= lighter.ttft_s and heavier.itl_s >= lighter.itl_s
    assert not predictions[0].saturated and predictions[-1].saturated


def test_queueing_beyond_the_kv_cache_shows_in_ttft_not_itl() -> None:
    """More clients than the KV cache holds wait in the queue: TTFT jumps, ITL stays."""
    hw = _hw()
    roomy = performance.predict(_work(concurrency=64, kv_capacity_tokens=1e6), hw, 4, 1)
    tight = performance.predict(_work(concurrency=64, kv_capacity_tokens=32 * 1280), hw, 4, 1)
    assert tight.running == 32 and tight.ttft_s > 2 * roomy.ttft_s
    assert tight.itl_s <= roomy.itl_s


@pytest.mark.parametrize("concurrency", [1, 16, 128])
def test_ttft_and_itl_grow_with_prompt_length(concurrency: int) -> None:
    hw = _hw()
    prompts = (128, 512, 1024, 4096, 16384)
    predictions = [
        performance.predict(_work(prompt_tokens=p, concurrency=concurrency), hw, 4, 1) for p in prompts
    ]
    for shorter, longer in zip(predictions, predictions[1:], strict=False):
        assert longer.ttft_s > shorter.ttft_s
        assert longer.itl_s >= shorter.itl_s
        assert longer.tokens_per_s <= shorter.tokens_per_s * 1.001


@pytest.mark.parametrize("concurrency", [1, 16, 64])
def test_moe_tp_scaling_is_sublinear_and_weaker_than_dense(concurrency: int) -> None:
    hw = _hw()
    moe = _work("mistralai/Mixtral-8x7B-Instruct-v0.1", concurrency=concurrency)
    dense = _work("meta-llama/Llama-3.1-70B-Instruct", concurrency=concurrency)
    moe_gain = performance.predict(moe, hw, 4, 1).itl_s / performance.predict(moe, hw, 8, 1).itl_s
    dense_gain = performance.predict(dense, hw, 4, 1).itl_s / performance.predict(dense, hw, 8, 1).itl_s
    assert 1.0 <= moe_gain < 1.6  # doubling the GPUs buys well under 2x
    assert moe_gain < dense_gain


def test_fp8_runs_at_the_fp8_rate_where_the_gpu_has_it() -> None:
    """fp8 weights halve the bytes everywhere; the doubled tensor rate only on Hopper and Ada."""
    prefill_heavy = dict(prompt_tokens=8192, output_tokens=16, concurrency=64)
    bf16 = _work(**prefill_heavy)
    fp8 = _work(bytes_per_weight=1.0, fp8_compute=True, **prefill_heavy)
    hopper = _hw()
    assert performance.predict(fp8, hopper, 4, 1).ttft_s < 0.7 * performance.predict(bf16, hopper, 4, 1).ttft_s
    ampere = _hw("NVIDIA-A100-SXM4-80GB")
    assert performance.predict(fp8, ampere, 4, 1).ttft_s > 0.8 * performance.predict(bf16, ampere, 4, 1).ttft_s


CASES = [
    (name, product, tp, pp, c, bpw)
    for name in ("meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B-Instruct",
                 "meta-llama/Llama-3.1-70B-Instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1")
    for product in ("NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-B200")
    for tp, pp in ((1, 1), (2, 1), (8, 1), (2, 4))
    for c in (1, 64)
    for bpw in (2.0, 0.5)
]


@pytest.mark.parametrize("name,product,tp,pp,concurrency,bpw", CASES)
def test_floors_are_never_crossed(name: str, product: str, tp: int, pp: int, concurrency: int,
                                  bpw: float) -> None:
    work = _work(name, concurrency=concurrency, bytes_per_weight=bpw)
    hw = _hw(product)
    p = performance.predict(work, hw, tp, pp)
    floor = work.arch.active_parameters * bpw / (tp * hw.memory_bandwidth_gbps * 1e9)
    assert p.floor_s == pytest.approx(floor)
    assert p.itl_s >= floor and p.ttft_s >= floor
    peak = max(hw.bf16_tflops, hw.fp8_tflops) * 1e12
    assert p.tokens_per_s <= tp * pp * peak / (2 * work.arch.active_parameters)
