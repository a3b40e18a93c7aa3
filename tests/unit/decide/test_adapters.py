"""LoRA adapters on running engines as plain data, read against the real engine's captured answers."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from shardwise.decide import adapters
from shardwise.gateway.decide import routes

LORA = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu" / "lora"


def capture(name: str) -> tuple[int, str]:
    """(HTTP status, body) of a captured answer: the body, then a line `HTTP <status>`."""
    text = (LORA / name).read_text().strip()
    body, _, status = text.rpartition("\n")
    return int(status.split()[1]), body


def test_the_served_adapters_are_the_models_with_a_parent_in_the_real_engines_list() -> None:
    models = json.loads((LORA / "models-with-adapters.json").read_text())
    assert adapters.served_adapters(models) == {"a1": "/adapters/a1", "a2": "/adapters/a2"}


def test_the_annotation_names_agree_with_the_gateways() -> None:
    assert adapters.LOADED_ANNOTATION == routes.LOADED_ADAPTERS_ANNOTATION
    assert {adapters.LOADED, adapters.LOADING, adapters.NO_READY_REPLICA} <= routes.ADAPTER_ON_ITS_WAY
    assert adapters.RANK_ABOVE_LIMIT not in routes.ADAPTER_ON_ITS_WAY


@pytest.mark.parametrize("name, reason, words", [
    ("load-rank-above-max.txt", adapters.RANK_ABOVE_LIMIT, "LoRA rank 16 is greater than max_lora_rank 8"),
    ("load-missing-path.txt", adapters.FILES_MISSING, "no adapter files at /p"),
])
def test_the_engines_refusals_read_as_reasons(name: str, reason: str, words: str) -> None:
    status, body = capture(name)
    failure = adapters.classify_refusal(status, body, "/p")
    assert failure is not None and failure.reason == reason and words in failure.message and failure.path == "/p"


def test_a_duplicate_load_is_a_success_and_an_unknown_answer_is_a_load_failure() -> None:
    assert adapters.classify_refusal(*capture("load-duplicate-name.txt"), "/p") is None
    assert adapters.classify_refusal(200, "Success: LoRA adapter 'a2' added successfully.", "/p") is None
    failure = adapters.classify_refusal(502, "<html>bad gateway</html>", "/p")
    assert failure is not None and failure.reason == adapters.LOAD_FAILED and "HTTP 502" in failure.message


def test_sync_loads_what_is_missing_unloads_what_is_extra_and_reloads_a_moved_one() -> None:
    wanted = {"a": "/adapters/a", "b": "/adapters/b2", "c": "/adapters/c"}
    served = {"a": "/adapters/a", "b": "/adapters/b1", "old": "/adapters/old"}
    actions = adapters.sync_actions(wanted, served, {})
    assert actions.unload == ("b", "old")
    assert actions.load == (("b", "/adapters/b2"), ("c", "/adapters/c"))
    assert adapters.sync_actions(served, served, {}) == adapters.Actions()
    # A hub id comes back as the folder the engine downloaded it to: not a move.
    assert adapters.sync_actions({"h": "org/h"}, {"h": "/root/.cache/huggingface/hub/x"}, {}) == adapters.Actions()


def test_a_refused_load_is_not_asked_again_for_the_same_path_until_retried() -> None:
    refused = {"c": adapters.Failure(adapters.RANK_ABOVE_LIMIT, "too big", "/adapters/c")}
    assert adapters.sync_actions({"c": "/adapters/c"}, {}, refused).load == ()
    assert adapters.sync_actions({"c": "/adapters/c"}, {}, refused, frozenset({"c"})).load == (("c", "/adapters/c"),)
    # The spec points it elsewhere: asked again at once.
    assert adapters.sync_actions({"c": "/adapters/c2"}, {}, refused).load == (("c", "/adapters/c2"),)


def pod(name: str, loaded: str | None = None, failures: dict[str, adapters.Failure] | None = None) -> dict[str, Any]:
    notes = {k: v for k, v in adapters.annotations(loaded.split(",") if loaded else [], failures or {}).items() if v}
    return {"metadata": {"name": name, "annotations": notes}}


def test_annotations_round_trip_and_are_stable() -> None:
    failure = adapters.Failure(adapters.FILES_MISSING, "no files", "/x")
    notes = adapters.annotations(["b", "a"], {"x": failure})
    assert notes[adapters.LOADED_ANNOTATION] == "a,b"
    assert notes == adapters.annotations(["a", "b"], {"x": failure})
    p = {"metadata": {"annotations": notes}}
    assert adapters.loaded_on(p) == {"a", "b"} and adapters.failures_on(p) == {"x": failure}
    assert adapters.annotations([], {}) == {adapters.LOADED_ANNOTATION: None, adapters.FAILURES_ANNOTATION: None}
    assert adapters.failures_on({"metadata": {"annotations": {adapters.FAILURES_ANNOTATION: "not json"}}}) == {}


def test_status_per_adapter_across_replicas() -> None:
    refused = {"big": adapters.Failure(adapters.RANK_ABOVE_LIMIT, "rank 16 is above 8", "/adapters/big")}
    pods = [pod("p1", "sql,chat", refused), pod("p2", "sql", refused)]
    entries = {e["name"]: e for e in adapters.adapter_status(["sql", "chat", "big"], pods)}
    assert entries["sql"] == {"name": "sql", "loadedReplicas": 2, "replicas": 2, "reason": "Loaded",
                              "message": "loaded on all 2 ready replicas"}
    assert entries["chat"]["reason"] == "Loading" and entries["chat"]["loadedReplicas"] == 1
    assert entries["big"]["reason"] == adapters.RANK_ABOVE_LIMIT and entries["big"]["message"] == "rank 16 is above 8"
    cond = adapters.condition(list(entries.values()))
    assert (cond.status, cond.reason) == (False, adapters.RANK_ABOVE_LIMIT) and "big: rank 16" in cond.message
    assert adapters.adapter_status(["sql"], [])[0]["reason"] == adapters.NO_READY_REPLICA


def test_the_condition_is_true_only_when_every_adapter_is_everywhere() -> None:
    loaded = adapters.adapter_status(["a"], [pod("p1", "a")])
    assert adapters.condition(loaded).status is True
    loading = adapters.adapter_status(["a"], [pod("p1", "a"), pod("p2")])
    assert (adapters.condition(loading).status, adapters.condition(loading).reason) == (False, "AdaptersLoading")
