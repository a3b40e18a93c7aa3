"""The machinery stands alone: importing every module of shardwise.kube loads no domain module."""

import subprocess
import sys

CHECK = """
import importlib, pkgutil, sys
import shardwise.kube as machinery
for module in pkgutil.iter_modules(machinery.__path__):
    importlib.import_module(f"shardwise.kube.{module.name}")
loaded = sorted(m for m in sys.modules if m.startswith("shardwise.") and not m.startswith("shardwise.kube"))
print(",".join(loaded))
"""


def test_importing_the_machinery_pulls_in_no_domain_module() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"shardwise.kube loaded {result.stdout.strip()}"


def test_the_check_sees_a_domain_import_when_there_is_one() -> None:
    # The same check over a module that does import the domain: it must name it.
    probe = CHECK.replace("import shardwise.kube as machinery", "import shardwise.kube as machinery\nimport shardwise.controller.cluster")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "shardwise.api" in result.stdout and "shardwise.controller" in result.stdout
