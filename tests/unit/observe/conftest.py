"""Shared fixtures for observe/ tests: the real vLLM 0.32 captures."""

from __future__ import annotations

import pathlib

import pytest
from observe_builders import CAPTURES


@pytest.fixture(scope="session")
def captures() -> pathlib.Path:
    return CAPTURES


@pytest.fixture(scope="session")
def t0_text() -> str:
    return (CAPTURES / "metrics-t0.txt").read_text()


@pytest.fixture(scope="session")
def t1_text() -> str:
    return (CAPTURES / "metrics-t1.txt").read_text()
