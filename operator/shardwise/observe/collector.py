"""Scrape the serving pods' vLLM `/metrics` concurrently: the only I/O in observe/.

One slow, dead or misbehaving pod must not hold up or break the others, so every target gets
its own timeout and every failure is returned as data (the shell turns it into a condition or
an event); `scrape` itself never raises for a pod.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping

import aiohttp

from shardwise.observe import parse

VLLM_PORT = 8000
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ScrapeError:
    """Why one pod gave no sample. kind: timeout, connect, http, parse, or error (unexpected)."""

    kind: str
    message: str


@dataclasses.dataclass(frozen=True)
class ScrapeResult:
    samples: Mapping[str, parse.Sample]
    errors: Mapping[str, ScrapeError]


# Where each engine serves Prometheus text: trtllm-serve's /metrics is JSON iteration stats, its
# Prometheus families are at /prometheus/metrics (mounted with return_perf_metrics, which the
# rendered options file sets; SERVING-SHAPES.md E).
METRICS_PATHS = {"vllm": "/metrics", "sglang": "/metrics", "trtllm": "/prometheus/metrics"}


def metrics_path(engine: str) -> str:
    """The Prometheus path of spec.engine's program (vLLM's for an unknown one)."""
    return METRICS_PATHS.get(engine, "/metrics")


def metrics_url(address: str, path: str = "/metrics") -> str:
    """`http://<address><path>`, adding vLLM's port 8000 when the address has none."""
    if address.startswith("["):  # [v6]:port or [v6]
        host_port = address if "]:" in address else f"{address}:{VLLM_PORT}"
    elif address.count(":") > 1:  # bare IPv6
        host_port = f"[{address}]:{VLLM_PORT}"
    elif ":" in address:
        host_port = address
    else:
        host_port = f"{address}:{VLLM_PORT}"
    return f"http://{host_port}{path}"


async def _scrape_one(
    address: str, timeout_s: float, session: aiohttp.ClientSession, path: str = "/metrics"
) -> parse.Sample | ScrapeError:
    url = metrics_url(address, path)
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url) as response:
                if response.status != 200:
                    return ScrapeError("http", f"GET {url}: HTTP {response.status}")
                text = await response.text(errors="replace")
    except TimeoutError:
        return ScrapeError("timeout", f"GET {url}: no answer within {timeout_s:g}s")
    except aiohttp.ClientError as error:
        return ScrapeError("connect", f"GET {url}: {error}")
    try:
        sample = parse.parse(text)
    except parse.MetricsError as error:
        return ScrapeError("parse", f"GET {url}: {error}")
    for why in sample.ignored:  # implausible values from a broken exporter, left out
        log.debug("GET %s: %s", url, why)
    return sample


async def scrape(
    targets: Mapping[str, str], *, timeout_s: float, session: aiohttp.ClientSession,
    path: str = "/metrics",
) -> ScrapeResult:
    """Scrape every target (pod name -> pod IP, or IP:port) at `path` at once; a sample or an
    error each."""
    pods = list(targets)
    results = await asyncio.gather(
        *(_scrape_one(targets[pod], timeout_s, session, path) for pod in pods), return_exceptions=True
    )
    samples: dict[str, parse.Sample] = {}
    errors: dict[str, ScrapeError] = {}
    for pod, result in zip(pods, results, strict=True):
        if isinstance(result, parse.Sample):
            samples[pod] = result
        elif isinstance(result, ScrapeError):
            errors[pod] = result
        elif isinstance(result, Exception):
            # Not anticipated above, but still one pod's problem, not the whole cycle's.
            errors[pod] = ScrapeError("error", f"{type(result).__name__}: {result}")
        else:
            raise result  # CancelledError and friends: the cycle itself is being stopped
    return ScrapeResult(samples, errors)
