"""What one simulated engine is: the plain data that the CLI and the fleet manager both build.

Kept apart from the engine so that the pure pod -> config mapping (`pods`) has no HTTP or asyncio
in its import graph.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from shardwise_runtime.sim import loopback

VLLM_PORT = 8000
ENGINES = ("vllm", "sglang", "trtllm")
# `--max-lora-rank` choices and defaults of vLLM 0.32 (serve-help-all.txt).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORA_RANK = 16
DEFAULT_MAX_LORAS = 1


@dataclasses.dataclass(frozen=True)
class LoraModule:
    """One `--lora-modules` entry: loaded at start-up; a bad one stops the engine from starting."""

    name: str
    path: str
    base_model_name: str | None = None  # the `parent` /v1/models gives; default: first served name


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """`--enable-lora` and its limits, plus where hub ids would be fetched from (HF_ENDPOINT)."""

    max_rank: int = DEFAULT_MAX_LORA_RANK
    max_loras: int = DEFAULT_MAX_LORAS
    max_cpu_loras: int | None = None  # None: vLLM's default, max_loras
    modules: tuple[LoraModule, ...] = ()
    hub_endpoint: str | None = None
    hub_offline: bool = False
    # (mountPath, local folder) of the pod's volumes: a kubelet's mounts, for the adapter paths the
    # operator sends (/model-cache/adapters/...), which live in the claim's PersistentVolume.
    mounts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.max_rank not in LORA_RANKS:
            raise ValueError(f"--max-lora-rank must be one of {LORA_RANKS}, got {self.max_rank}")
        if self.max_loras < 1:
            raise ValueError("--max-loras must be >= 1")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError("--max-cpu-loras must be >= --max-loras")


def env_flag(value: str | None) -> bool:
    """A boolean environment variable as vLLM reads VLLM_ALLOW_RUNTIME_LORA_UPDATING."""
    return (value or "").strip().lower() in ("1", "true")


def parse_lora_modules(items: Sequence[str]) -> tuple[LoraModule, ...]:
    """`--lora-modules` values: `name=path`, a JSON object, or a JSON list of objects."""
    modules: list[LoraModule] = []
    for item in items:
        if not item.lstrip().startswith(("{", "[")):
            name, eq, path = item.partition("=")
            if not eq or not name or not path:
                raise ValueError(f"--lora-modules entry {item!r} is not name=path or JSON")
            modules.append(LoraModule(name, path))
            continue
        try:
            parsed = json.loads(item)
        except ValueError as error:
            raise ValueError(f"--lora-modules entry {item!r}: {error}") from None
        for entry in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(entry, dict) or not entry.get("name") or not entry.get("path"):
                raise ValueError(f"--lora-modules entry {entry!r} needs `name` and `path`")
            base = entry.get("base_model_name")
            modules.append(
                LoraModule(str(entry["name"]), str(entry["path"]), str(base) if base else None)
            )
    return tuple(modules)


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
    lora: LoraConfig | None = None  # None: started without --enable-lora
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING: without it vLLM registers no load/unload routes at all.
    runtime_lora_updating: bool = False
    # Disaggregation (handoff.py): "prefill", "decode" or None (both phases), and the connector.
    role: str | None = None
    kv_connector: str | None = None
    # Whose API and metrics the engine speaks: the program its pod's argv starts (pods.engine_of).
    engine: str = "vllm"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.role not in (None, "prefill", "decode"):
            raise ValueError(f"role must be prefill, decode or None, got {self.role!r}")
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
