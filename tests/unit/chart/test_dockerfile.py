"""What can be checked of the Dockerfile without Docker: bases pinned, sources present, the
operator non-root, and every command it names a console script of the package."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

import pytest
from chart_support import ROOT

from shardwise import cli
from shardwise.api import v1alpha1

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined and ARGs expanded."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            stages.append(Stage(words[2] if len(words) == 3 and words[1].upper() == "AS" else "", base))
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


ARGS, STAGES = parse(DOCKERFILE.read_text())
BY_NAME = {s.name: s for s in STAGES}
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def commands(stage: Stage) -> list[str]:
    """Programs the stage runs: its ENTRYPOINT and each `X --help` smoke check."""
    found = [json.loads(e)[0] for e in stage.all("ENTRYPOINT")]
    for run in stage.all("RUN"):
        found += re.findall(r"(?:^|&&)\s*([\w-]+) --help", run)
    return found


def test_stages_are_the_documented_targets() -> None:
    assert [s.name for s in STAGES] == ["build", "operator", "runtime"]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_base_images_are_pinned(stage: Stage) -> None:
    if stage.base in BY_NAME:
        return
    name, _, tag = stage.base.partition(":")
    assert "@sha256:" in stage.base or (tag and tag != "latest" and re.search(r"\d", tag)), stage.base
    # A bare major.minor tag (python:3.11-slim) moves under us; pin the patch release.
    assert "@sha256:" in stage.base or re.search(r"\d+\.\d+\.\d+", tag), stage.base


def test_runtime_is_built_on_the_vllm_image_the_operator_renders() -> None:
    assert BY_NAME["runtime"].base == v1alpha1.DEFAULT_IMAGE


def test_copied_sources_exist_and_enter_the_build_context() -> None:
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    sources = []
    for stage in STAGES:
        for copy in stage.all("COPY"):
            words = [w for w in shlex.split(copy) if not w.startswith("--")]
            if "--from=" in copy:
                continue
            sources += words[:-1]
    assert sources, "the Dockerfile copies nothing from the context"
    for source in sources:
        assert (ROOT / source).exists(), source
        top = source.strip("/").split("/")[0]
        assert not any(fnmatch.fnmatch(top, pattern) for pattern in ignored), f"{source} is in .dockerignore"


def test_every_command_is_a_console_script() -> None:
    named = {c for stage in STAGES for c in commands(stage)}
    assert named == set(SCRIPTS), "the images should run exactly the package's console scripts"


def test_operator_runs_shardwise_run_as_a_numeric_non_root_user() -> None:
    operator = BY_NAME["operator"]
    entrypoint = json.loads(operator.all("ENTRYPOINT")[-1])
    assert entrypoint == ["shardwise", "run"]
    cli.build_parser().parse_args(entrypoint[1:])  # `run` is a real subcommand (SystemExit if not)
    user = operator.all("USER")[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, user  # numeric: the kubelet can check runAsNonRoot


def test_operator_installs_no_extras_and_runtime_installs_the_runtime_extra() -> None:
    operator_runs = " ".join(BY_NAME["operator"].all("RUN"))
    assert "shardwise-*.whl" in operator_runs and "[" not in operator_runs
    assert "shardwise[runtime]" in " ".join(BY_NAME["runtime"].all("RUN"))
