"""What one simulated engine is: the plain data that the CLI and the fleet manager both build.

Kept apart from the engine so that the pure pod -> config mapping (`pods`) has no HTTP or asyncio
in its import graph.
"""

from __future__ import annotations

import dataclasses

from shardwise_runtime.sim import loopback

VLLM_PORT = 8000


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """One engine: where it listens, what it serves and the latency it was predicted to have."""

    host: str
    model: str
    served_model_names: tuple[str, ...]
    port: int = VLLM_PORT
    ttft_ms: float = 200.0
    itl_ms: float = 20.0
    max_concurrency: int = 32
    max_model_len: int = 8192
    tensor_parallel_size: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not loopback.is_loopback_host(self.host):
            raise ValueError(f"engine host {self.host!r} is not a loopback address")
        if not self.served_model_names or not all(self.served_model_names):
            raise ValueError("at least one non-empty served model name is required")
        if not 0 <= self.port < 65536:  # 0: any free port (tests)
            raise ValueError(f"port {self.port} out of range")
        if self.ttft_ms < 0 or self.itl_ms < 0:
            raise ValueError("latencies must not be negative")
        if self.max_concurrency < 1 or self.max_model_len < 1 or self.tensor_parallel_size < 1:
            raise ValueError("max_concurrency, max_model_len and tensor_parallel_size must be >= 1")

    @property
    def served_model_name(self) -> str:
        """The name vLLM puts in the `model_name` label: the first served name."""
        return self.served_model_names[0]
