"""A model's architecture from its own config.json, for models the planner's catalog lacks.

Part of reconcile's gather step: when a plan is to be made and neither the catalog nor
spec.model.architecture gives the planner its numbers, the repo's config.json (and its weights'
size from the safetensors index or the hub's metadata) is read at the spec's revision through
huggingface_hub (shardwise/hub.py), turned into numbers by the pure planner/hfconfig.py, and the
plan shows what was used and where it came from (status.plan.architecture.source).

Answers are remembered per (repo, revision, endpoint): a read blocks a worker for as long as the
hub takes, so it is made once per model, not per reconcile. A refusal (not found, gated,
unreachable) is remembered for a minute, then asked again. The operator reads no Secrets, so a
gated repo is refused here with the hub's words: give spec.model.architecture for it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from shardwise import hub
from shardwise.planner import hfconfig, models

RETRY_AFTER_S = 60.0


@dataclasses.dataclass(frozen=True)
class Resolved:
    architecture: models.ModelArch | None = None
    failure: tuple[str, str] | None = None  # (reason, message): a Planned=False condition


class ArchitectureReader:
    """Thread-safe; one per operator process."""

    def __init__(self, *, endpoint: str | None = None,
                 files: Callable[..., hfconfig.RepoFiles] = hub.HubFiles,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._endpoint = endpoint
        self._files = files
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str, str | None], tuple[Resolved, float]] = {}

    def resolve(self, model_spec: Mapping[str, Any], revision: str | None, endpoint: str | None) -> Resolved:
        if not hfconfig.needs_config(model_spec):
            return Resolved()
        endpoint = endpoint or self._endpoint
        key = (str(model_spec.get("name") or "").strip(), revision or "main", endpoint)
        now = self._clock()
        with self._lock:
            known = self._known.get(key)
        if known is not None and (known[0].failure is None or now - known[1] < RETRY_AFTER_S):
            return known[0]
        result = self._read(model_spec, key)
        with self._lock:
            self._known[key] = (result, now)
        return result

    def _read(self, model_spec: Mapping[str, Any], key: tuple[str, str, str | None]) -> Resolved:
        name, revision, endpoint = key
        try:
            files = self._files(name, revision=revision, endpoint=endpoint)
            return Resolved(architecture=hfconfig.resolve_architecture(model_spec, files))
        except hub.HubError as exc:
            hint = (" (the operator reads no Secrets: give spec.model.architecture for a gated model)"
                    if exc.reason.startswith("Gated") else "")
            return Resolved(failure=(exc.reason, f"{exc.message}{hint}"))
        except hfconfig.ConfigError as exc:
            return Resolved(failure=("ModelConfigUnusable", f"{exc}; give spec.model.architecture"))
