"""Helpers for the simulator tests: the real vLLM 0.32 captures and an in-process engine.

A plain module rather than conftest.py so that tests import it by a name unique in the tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from shardwise_runtime.sim import app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu"

# The captured server: `--served-model-name tiny --max-model-len 256`, TP 2. Latencies are small
# so that the suite stays fast.
TINY = EngineConfig(
    host="127.0.0.1",
    port=0,
    model="/models/tiny",
    served_model_names=("tiny",),
    ttft_ms=5.0,
    itl_ms=1.0,
    max_concurrency=8,
    max_model_len=256,
    tensor_parallel_size=2,
)


def capture(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


def captured_error(name: str) -> tuple[dict[str, Any], int]:
    """The JSON body and HTTP code of one error-*.txt capture."""
    body, status = capture(name).strip().rsplit("\n", 1)
    return json.loads(body), int(status.removeprefix("HTTP "))


def shape(value: Any) -> Any:
    """JSON structure with scalars replaced by their type: what two bodies must share."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]  # keeps key order
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


@dataclasses.dataclass(frozen=True)
class Served:
    engine: Engine
    url: str  # http://127.0.0.1:PORT


@contextlib.asynccontextmanager
async def serving(config: EngineConfig = TINY, **changes: Any) -> AsyncIterator[Served]:
    """Serve one engine on 127.0.0.1 and a free port for the duration of the block."""
    engine = Engine(dataclasses.replace(config, **changes))
    runner, port = await app.start_site(engine, shutdown_timeout_s=0.1)
    try:
        yield Served(engine, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
