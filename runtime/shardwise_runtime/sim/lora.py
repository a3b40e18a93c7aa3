"""The LoRA adapters one simulated engine serves, and vLLM 0.32's answers to loading them: pure.

The operator (shardwise.decide.adapters) reads /v1/models entries that have a `parent` and
classifies refusals by HTTP code and message, so every body here copies
tests/fixtures/vllm-0.32-cpu/lora/ to the character. Checks run in vLLM's order: the request's
fields, a duplicate name (the API server), then the files (the worker): none found, rank above
--max-lora-rank. Answers the captures do not show (success of a load, LoRA not enabled, a folder
with a config but no weights) use the wording of vLLM's source and are marked so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from shardwise_runtime.sim import adapterfiles, errors


@dataclasses.dataclass(frozen=True)
class Adapter:
    """One loaded adapter: `root` is the path it was loaded from, as /v1/models shows it."""

    name: str
    root: str
    parent: str
    rank: int


@dataclasses.dataclass(frozen=True)
class LoadRequest:
    name: str
    path: str
    inplace: bool


def _invalid(message: str) -> errors.ErrorBody:
    return errors.error_body(message, "InvalidUserInput", None, 400)


def _worker_failed(inner: str) -> errors.ErrorBody:
    # How 0.32 reports an exception raised in the engine's worker (load-rank-above-max.txt).
    return errors.error_body(
        f"Call to add_lora method failed: Worker failed with error '{inner}', please check the "
        "stack trace above for the root cause",
        "InternalServerError",
        None,
        500,
    )


def not_found(name: str, path: str) -> errors.ErrorBody:
    """404 for a path with no adapter_config.json (load-missing-path.txt)."""
    return errors.error_body(
        f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError", None, 404
    )


def rank_above_max(rank: int, max_rank: int) -> errors.ErrorBody:
    """500 from the worker for r above --max-lora-rank (load-rank-above-max.txt)."""
    return _worker_failed(f"LoRA rank {rank} is greater than max_lora_rank {max_rank}.")


def no_weights(path: str) -> errors.ErrorBody:
    """500 for a config without adapter_model.* (not captured; vLLM's worker message)."""
    return _worker_failed(f"Loading lora {path} failed")


def lora_disabled() -> errors.ErrorBody:
    """500 for a load on an engine started without --enable-lora (not captured)."""
    return _worker_failed("LoRA is not enabled. Use --enable-lora to enable LoRA.")


def unknown_adapter(name: str) -> errors.ErrorBody:
    """404 for unloading a name that is not loaded (unload-unknown.txt)."""
    return errors.error_body(
        f"The lora adapter '{name}' cannot be found.", "NotFoundError", None, 404
    )


def added_text(name: str) -> str:
    """The plain-text 200 body of a load (not captured; vLLM's wording, as unload-ok.txt)."""
    return f"Success: LoRA adapter '{name}' added successfully."


def removed_text(name: str) -> str:
    """The plain-text 200 body of an unload (unload-ok.txt)."""
    return f"Success: LoRA adapter '{name}' removed successfully."


def _problems(
    body: object, strings: tuple[str, ...], bools: tuple[str, ...]
) -> list[dict[str, Any]]:
    # The pydantic errors FastAPI reports for vLLM's (Un)LoadLoRAAdapterRequest models.
    if not isinstance(body, dict):
        return [
            {
                "type": "model_attributes_type",
                "loc": "body",
                "msg": "Input should be a valid dictionary or object to extract fields from",
                "input": body,
            }
        ]
    problems: list[dict[str, Any]] = []
    for field in strings:
        value = body.get(field)
        if value is None:
            problems.append(
                {"type": "missing", "loc": f"body.{field}", "msg": "Field required", "input": body}
            )
        elif not isinstance(value, str):
            problems.append(
                {
                    "type": "string_type",
                    "loc": f"body.{field}",
                    "msg": "Input should be a valid string",
                    "input": value,
                }
            )
    for field in bools:
        value = body.get(field)
        if value is not None and not isinstance(value, bool):
            problems.append(
                {
                    "type": "bool_type",
                    "loc": f"body.{field}",
                    "msg": "Input should be a valid boolean",
                    "input": value,
                }
            )
    return problems


def read_load(body: object) -> LoadRequest | errors.ErrorBody:
    """A /v1/load_lora_adapter body, or the 400 vLLM gives for it."""
    problems = _problems(body, ("lora_name", "lora_path"), ("load_inplace",))
    if problems:
        return errors.validation_failed(problems)
    assert isinstance(body, dict)
    if not body["lora_name"] or not body["lora_path"]:
        return _invalid("Both 'lora_name' and 'lora_path' must be provided.")
    return LoadRequest(body["lora_name"], body["lora_path"], bool(body.get("load_inplace")))


def read_unload(body: object) -> str | errors.ErrorBody:
    """The name in a /v1/unload_lora_adapter body, or the 400 vLLM gives for it."""
    problems = _problems(body, ("lora_name",), ())
    if problems:
        return errors.validation_failed(problems)
    assert isinstance(body, dict)
    if not body["lora_name"]:
        return _invalid("'lora_name' needs to be provided to unload a LoRA adapter.")
    return str(body["lora_name"])


class Registry:
    """The adapters of one engine, in load order (the order /v1/models lists them)."""

    def __init__(self, parent: str, max_rank: int) -> None:
        self.parent = parent
        self.max_rank = max_rank
        self._adapters: dict[str, Adapter] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._adapters

    def __iter__(self) -> Iterator[Adapter]:
        return iter(list(self._adapters.values()))

    def check_name(self, request: LoadRequest) -> errors.ErrorBody | None:
        """The API server's check, before any file is read: the name must be new."""
        if request.name in self._adapters and not request.inplace:
            return _invalid(
                f"The lora adapter '{request.name}' has already been loaded. If you want to load "
                "the adapter in place, set 'load_inplace' to True."
            )
        return None

    def add(
        self,
        request: LoadRequest,
        files: adapterfiles.AdapterFiles | None,
        parent: str | None = None,
    ) -> errors.ErrorBody | None:
        """Register what `files` says is at the request's path, or the worker's refusal."""
        refused = self.check_name(request)  # again: another load may have won the wait for files
        if refused is not None:
            return refused
        if files is None:
            return not_found(request.name, request.path)
        if files.rank > self.max_rank:
            return rank_above_max(files.rank, self.max_rank)
        if not files.has_weights:
            return no_weights(request.path)
        self._adapters.pop(request.name, None)  # in place: it moves to the end, as re-added
        self._adapters[request.name] = Adapter(
            request.name, request.path, parent or self.parent, files.rank
        )
        return None

    def remove(self, name: str) -> errors.ErrorBody | None:
        """Unload `name`, or the 404 for a name never loaded (unload-unknown.txt)."""
        return unknown_adapter(name) if self._adapters.pop(name, None) is None else None
