"""The API server rejects resource names whose children could not exist (the CEL rule on
metadata.name that shardwise.api.names generates into the CRD), with a sentence a person can act on,
and still accepts every name the examples and fixtures use."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from shardwise.api import names
from tests.e2e.support import Kubectl

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
VALID = {
    "apiVersion": "shardwise.io/v1alpha1",
    "kind": "InferenceDeployment",
    "metadata": {"name": "ok"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
}
TOO_LONG = f"metadata.name must be at most {names.MAX_NAME_LENGTH} characters"
NOT_DNS1035 = "must start with a lowercase letter and contain only lowercase letters, digits and '-'"


def named(name: str) -> dict:
    doc = copy.deepcopy(VALID)
    doc["metadata"]["name"] = name
    return doc


# (case, name, words the API server's message must contain)
BAD_NAMES = [
    ("dot", "llama.v3", [NOT_DNS1035, "no dots"]),
    ("leading digit", "3llama", [NOT_DNS1035, "DNS-1035"]),
    ("one over the longest child", "m" * (names.MAX_NAME_LENGTH + 1), [TOO_LONG, "-lws"]),
    ("too long for the -lws suffix", "m" * 60, [TOO_LONG]),
    ("too long for a label value", "m" * 64, [TOO_LONG]),
    ("subdomain-sized", "a" + ".b" * 100, [TOO_LONG]),
]


@pytest.mark.parametrize("case,name,words", BAD_NAMES, ids=[c[0] for c in BAD_NAMES])
def test_api_server_rejects_names_with_invalid_children(kubectl: Kubectl, case: str, name: str,
                                                        words: list[str]) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(named(name)), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted {name!r}"
    for word in words:
        assert word in result.stderr, f"{case}: {word!r} not in: {result.stderr.strip()}"


@pytest.mark.parametrize("name", ["a", "llama-70b", "m" * names.MAX_NAME_LENGTH, "x-1-y"])
def test_names_at_the_boundary_are_accepted(kubectl: Kubectl, name: str) -> None:
    kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(named(name)))


# Planner fixtures the API server rejects on purpose (they exercise the offline planner's errors).
OFFLINE_ONLY = {"qwen-7b-tp8.yaml"}  # tensor without pipeline: InvalidParallelism offline


def _shipped() -> list[pathlib.Path]:
    found = []
    fixtures = (ROOT / "tests/fixtures/deployments").glob("*.yaml")
    for path in [*sorted((ROOT / "examples").rglob("*.yaml")),
                 *sorted(p for p in fixtures if p.name not in OFFLINE_ONLY)]:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        if any(d.get("kind") == "InferenceDeployment" for d in docs):
            found.append(path)
    return found


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.name)
def test_every_shipped_example_is_still_accepted(kubectl: Kubectl, path: pathlib.Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "InferenceDeployment":
            doc["metadata"].pop("namespace", None)  # into the test's namespace
            kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc))
