"""The autoscale core stays pure: no Kubernetes, no I/O, no clock. The import list is the proof."""

from __future__ import annotations

import ast
import pathlib

import shardwise.autoscale

ALLOWED = {"__future__", "collections.abc", "dataclasses", "enum", "math", "random",
           "re", "typing"}
PACKAGE = pathlib.Path(shardwise.autoscale.__file__).parent


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_autoscale_modules_import_only_the_standard_library_and_themselves() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) >= 6
    for path in modules:
        foreign = {name for name in imported_modules(path)
                   if name not in ALLOWED and not name.startswith("shardwise.autoscale")}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
