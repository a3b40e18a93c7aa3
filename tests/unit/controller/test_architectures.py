"""The operator's reader of config.json: once per model, refusals retried after a minute, words kept."""

from __future__ import annotations

import pathlib
from typing import Any

from shardwise import hub
from shardwise.controller.architectures import RETRY_AFTER_S, ArchitectureReader

FIXTURE = pathlib.Path(__file__).parents[2] / "fixtures" / "hub-configs" / "Qwen" / "Qwen3-32B"
MODEL = {"name": "Qwen/Qwen3-32B"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_model_is_read_once_and_a_catalog_model_never() -> None:
    opened: list[tuple[str, str | None]] = []

    def files(repo: str, *, revision: str | None, endpoint: str | None) -> hub.FolderFiles:
        opened.append((repo, revision))
        return hub.FolderFiles(FIXTURE)

    reader = ArchitectureReader(files=files)
    first = reader.resolve(MODEL, None, None)
    assert first.architecture is not None and first.failure is None
    assert first.architecture.layers == 64  # Qwen3-32B's num_hidden_layers
    assert reader.resolve(MODEL, None, None) is first
    assert reader.resolve({"name": "meta-llama/Llama-3.1-8B-Instruct"}, None, None).architecture is None
    assert opened == [("Qwen/Qwen3-32B", "main")]


def test_a_refusal_keeps_the_hubs_words_and_is_asked_again_after_a_while() -> None:
    clock = Clock()
    answers: list[Any] = [hub.HubError("GatedModelNeedsToken", "401: this repo is gated"), hub.FolderFiles(FIXTURE)]

    def files(repo: str, *, revision: str | None, endpoint: str | None) -> hub.FolderFiles:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reader = ArchitectureReader(files=files, clock=clock)
    refused = reader.resolve(MODEL, "main", "http://hub.local")
    assert refused.failure is not None and refused.failure[0] == "GatedModelNeedsToken"
    assert "401: this repo is gated" in refused.failure[1] and "spec.model.architecture" in refused.failure[1]
    clock.now = RETRY_AFTER_S - 1
    assert reader.resolve(MODEL, "main", "http://hub.local") is refused  # not asked again yet
    clock.now = RETRY_AFTER_S + 1
    assert reader.resolve(MODEL, "main", "http://hub.local").architecture is not None
