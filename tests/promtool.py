"""promtool (Debian's `prometheus` package, installed by hack/install-deps.sh) for the tests that
lint metrics and rules: one function per subcommand, findings as lines."""

from __future__ import annotations

import pathlib
import shutil
import subprocess


def binary() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: run hack/install-deps.sh (Debian package `prometheus`)"
    return found


def check_metrics(body: str) -> list[str]:
    """promtool's findings on one /metrics body ([] when clean); a parse error raises."""
    done = subprocess.run([binary(), "check", "metrics"], input=body, capture_output=True,
                          text=True, timeout=60)
    findings = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode not in (0, 3):  # 3: lint findings; anything else: not parseable
        raise AssertionError(f"promtool check metrics failed ({done.returncode}): {findings}")
    return sorted(findings)


def run(*args: str | pathlib.Path, cwd: pathlib.Path | None = None) -> str:
    """Run `promtool ARGS`, assert it succeeded, return what it printed."""
    done = subprocess.run([binary(), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(map(str, args))} failed:\n{out}"
    return out
