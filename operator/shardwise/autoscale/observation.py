"""What the autoscaler sees at one evaluation: latency, load and replica counts, as plain numbers.

The controller fills it from `status.latency` (windowed vLLM metrics), the workload's status and
the GPU inventory; the decision function reads nothing else, so a test states a situation in one
constructor call.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """One evaluation's inputs. Latencies are None when the window held no requests.

    Counts (`waiting`, `running`, `requests_per_second`) are totals over all replicas.
    `kv_cache_usage` is vLLM's `kv_cache_usage_perc` averaged over replicas: a fraction, 0 to 1.
    `capacity_replicas` is the most replicas the GPUs that exist can hold, counting the running
    ones; None when unknown, which leaves scaling unbounded by capacity. The floors are what a
    scale-down cannot change: only latency above them shrinks as load spreads over more replicas.
    """

    current_replicas: int
    replicas_ready: int
    replicas_starting: int = 0
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    waiting: float = 0.0
    running: float = 0.0
    kv_cache_usage: float | None = None
    requests_per_second: float = 0.0
    # Requests the gateway holds for this model because no replica is ready (scale from zero):
    # at zero replicas the only sign of demand, since no engine is there to report any.
    held_requests: float = 0.0
    capacity_replicas: int | None = None
    # Inter-token latency of an idle replica (the plan's prediction): the part that more replicas
    # cannot remove. Decode time grows about linearly with the batch above it, so projecting only
    # the excess is sound. TTFT has no floor here on purpose: it holds queueing, which grows
    # faster than linearly near saturation, so it keeps the conservative all-load projection.
    itl_floor_ms: float | None = None
    # How long a new replica should take to serve (engine start plus weight load, from the model
    # cache's state): the startup horizon until a scale-up has been measured.
    expected_startup_s: float | None = None
    # A rollout is replacing replicas (status.rollout not Complete): the old ones serve until the
    # new ones are ready, so none may be removed under it. Its loading pods are not ready, so
    # they are in neither replicas_ready nor the latency they are about to change.
    rollout_in_progress: bool = False

    @property
    def has_traffic(self) -> bool:
        """Whether anything was asked of the model in the window."""
        return self.requests_per_second > 0 or self.waiting > 0 or self.running > 0 or self.held_requests > 0


# Beyond these a figure is a broken exporter, not load: vLLM caps a server's queue far lower, and no
# request waits a day for its first token.
_MAX_COUNT = 1e9
_MAX_LATENCY_MS = 86_400_000.0


def _latency(value: float | None) -> float | None:
    return value if value is not None and 0 <= value <= _MAX_LATENCY_MS else None


def _amount(value: float) -> float:
    return value if 0 <= value <= _MAX_COUNT else 0.0  # also NaN


def sanitized(obs: Observation) -> Observation:
    """`obs` with every figure a decision can use: a non-finite, negative or absurd latency or KV
    usage is treated as not measured, such a count as zero, a negative replica count as zero.

    The collector already drops such values from scrapes; this keeps decide() total over any input
    (an Observation built by hand, a status edited by someone else).
    """
    kv = obs.kv_cache_usage
    return dataclasses.replace(
        obs,
        current_replicas=max(0, obs.current_replicas),
        replicas_ready=max(0, obs.replicas_ready),
        replicas_starting=max(0, obs.replicas_starting),
        ttft_p95_ms=_latency(obs.ttft_p95_ms),
        itl_p95_ms=_latency(obs.itl_p95_ms),
        e2e_p95_ms=_latency(obs.e2e_p95_ms),
        itl_floor_ms=_latency(obs.itl_floor_ms),
        waiting=_amount(obs.waiting),
        running=_amount(obs.running),
        requests_per_second=_amount(obs.requests_per_second),
        kv_cache_usage=kv if kv is not None and 0 <= kv <= 1 else None,
        capacity_replicas=(None if obs.capacity_replicas is None
                           else max(0, obs.capacity_replicas)),
    )
