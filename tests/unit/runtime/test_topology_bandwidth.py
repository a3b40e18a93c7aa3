"""The bandwidth probe's arithmetic, cache and skip paths (torch is not installed here)."""

import importlib.util
import json
from pathlib import Path

import pytest

from shardwise_runtime.topology import bandwidth


@pytest.mark.parametrize("ranks, busbw", [(2, 100.0), (4, 150.0), (8, 175.0)])
def test_busbw_is_algbw_times_two_n_minus_one_over_n(ranks: int, busbw: float) -> None:
    # 100 GB in one second is an algbw of 100 GB/s.
    assert bandwidth.bus_bandwidth_gbps(100 * 10**9, 1.0, ranks) == pytest.approx(busbw)


def test_busbw_rejects_what_has_no_bandwidth() -> None:
    with pytest.raises(ValueError):
        bandwidth.bus_bandwidth_gbps(1, 1.0, 1)
    with pytest.raises(ValueError):
        bandwidth.bus_bandwidth_gbps(1, 0.0, 2)


def test_one_gpu_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert bandwidth.measure_busbw_gbps([0]) is None
    assert "needs 2 or more GPUs" in caplog.text


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_without_torch_it_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert bandwidth.measure_busbw_gbps([0, 1]) is None
    assert "torch is not installed" in caplog.text


def test_cached_result_for_the_same_fingerprint_is_reused(tmp_path: Path) -> None:
    cache = tmp_path / "busbw.json"
    cache.write_text(json.dumps({"fingerprint": "abc", "busbw_gbps": 362.5}))
    assert bandwidth.cached_busbw_gbps("abc", [0, 1], cache) == 362.5


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_other_fingerprint_measures_again_and_caches_nothing_on_skip(tmp_path: Path) -> None:
    cache = tmp_path / "busbw.json"
    cache.write_text(json.dumps({"fingerprint": "old", "busbw_gbps": 362.5}))
    assert bandwidth.cached_busbw_gbps("new", [0, 1], cache) is None
    assert json.loads(cache.read_text())["fingerprint"] == "old"
