"""Optional measured NVLink bandwidth: an NCCL all-reduce bus-bandwidth probe.

Why: the bandwidth label derived from link counts is a datasheet figure; a measured all-reduce
shows what tensor parallelism will actually get (a degraded link, a fabric manager that is not
running, NCCL falling back to PCIe). It needs torch and at least two GPUs, so it is optional:
where either is missing it returns None and logs why, and the label is simply absent. It
occupies the GPUs for a few seconds, so it runs once per topology fingerprint (the result is
cached in a file) and only with `shardwise-labeler --measure-bandwidth`.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, and for all-reduce
busbw = algbw x 2(n-1)/n, which makes the figure comparable to the hardware's link bandwidth
whatever the GPU count. Published as shardwise.io/nvlink-measured-busbw-gbps (GB/s, 10^9 bytes).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("shardwise.bandwidth")

DEFAULT_CACHE = Path("/var/cache/shardwise/busbw.json")
MESSAGE_BYTES = 256 * 1024 * 1024
WARMUP_ITERATIONS = 5
TIMED_ITERATIONS = 20


def bus_bandwidth_gbps(message_bytes: int, seconds: float, ranks: int) -> float:
    """All-reduce bus bandwidth in GB/s for one operation of `message_bytes` per rank."""
    if ranks < 2 or seconds <= 0:
        raise ValueError(f"need 2+ ranks and a positive time, got {ranks} ranks, {seconds}s")
    algbw = message_bytes / seconds / 1e9
    return algbw * 2 * (ranks - 1) / ranks


def cached_busbw_gbps(fingerprint: str, gpus: Sequence[int], cache: Path) -> float | None:
    """The measured busbw for this topology, from the cache or by measuring once."""
    try:
        stored = json.loads(cache.read_text())
        if stored.get("fingerprint") == fingerprint:
            return float(stored["busbw_gbps"])
    except (OSError, ValueError, KeyError):
        pass  # no cache yet, or unreadable: measure
    busbw = measure_busbw_gbps(gpus)
    if busbw is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({"fingerprint": fingerprint, "busbw_gbps": busbw}))
        except OSError as error:
            log.warning("could not cache the bandwidth probe result in %s: %s", cache, error)
    return busbw


def measure_busbw_gbps(gpus: Sequence[int]) -> float | None:
    """Run the probe over the given NVML GPU indices; None (logged) when it cannot run."""
    if len(gpus) < 2:
        log.info("bandwidth probe skipped: needs 2 or more GPUs in an NVLink domain, got %d",
                 len(gpus))
        return None
    if importlib.util.find_spec("torch") is None:
        log.info("bandwidth probe skipped: torch is not installed")
        return None
    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available() or torch.cuda.device_count() < len(gpus):
        log.info("bandwidth probe skipped: CUDA sees %d GPUs, the domain has %d",
                 torch.cuda.device_count() if torch.cuda.is_available() else 0, len(gpus))
        return None
    # NVML numbers GPUs by PCI bus id; make CUDA agree before the workers pick devices.
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    results: Any = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_worker, args=(list(gpus), results), nprocs=len(gpus), join=True,
                       start_method="spawn")
    seconds = results.get()
    busbw = bus_bandwidth_gbps(MESSAGE_BYTES, seconds, len(gpus))
    log.info("measured all-reduce busbw over GPUs %s: %.0f GB/s", list(gpus), busbw)
    return busbw


def _worker(rank: int, gpus: list[int], results: Any) -> None:  # pragma: no cover - needs GPUs
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(gpus[rank])
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29599", rank=rank,
                            world_size=len(gpus))
    try:
        data = torch.ones(MESSAGE_BYTES // 2, dtype=torch.float16, device="cuda")
        for _ in range(WARMUP_ITERATIONS):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(TIMED_ITERATIONS):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / TIMED_ITERATIONS
        if rank == 0:
            results.put(elapsed)
    finally:
        dist.destroy_process_group()
