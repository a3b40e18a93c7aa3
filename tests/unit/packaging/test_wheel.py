"""The wheel users install (and the images are built from) holds the operator and the runtime,
not the local control-plane harness."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_wheel_leaves_out_the_local_control_plane(tmp_path: pathlib.Path) -> None:
    # What the Dockerfile's build stage copies, built the way it builds it.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("operator", "runtime"):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path),
                    str(source)], check=True, timeout=600)
    (wheel,) = tmp_path.glob("shardwise-*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    assert not [f for f in files if f.startswith("shardwise/devcluster/")]
    for module in ("shardwise/controller/manager.py", "shardwise/planner/gpus.yaml", "shardwise_runtime/launcher/main.py"):
        assert module in files
