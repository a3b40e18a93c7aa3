"""Fixtures for the chart tests: the real helm binary, and a renderer returning parsed objects."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from chart_support import CHART, run_helm

from shardwise.devcluster import binaries

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    try:
        found = binaries.find_binaries()
    except binaries.MissingBinaries as exc:
        pytest.skip(f"helm could not be built with the control-plane binaries: {exc}")
    if "helm" not in found:
        pytest.skip("hack/build-control-plane.sh did not produce helm")
    return found["helm"]


@pytest.fixture(scope="session")
def render(helm: pathlib.Path) -> Render:
    """`helm template` with --set pairs and extra flags; fails the test on any helm error."""

    def _render(*sets: str, flags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        args = ["template", "rel", str(CHART), "--namespace", "sw-system",
                *flags, *[a for s in sets for a in ("--set", s)]]
        result = run_helm(helm, *args)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render
