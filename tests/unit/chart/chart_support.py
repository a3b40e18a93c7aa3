"""Helpers for the chart tests: paths, running the real helm, picking objects from a render."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "shardwise"


def run_helm(helm: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in matches]}"
    return matches[0]
