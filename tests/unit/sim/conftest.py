"""Async tests in this folder run on asyncio (the anyio pytest plugin's backend choice)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
