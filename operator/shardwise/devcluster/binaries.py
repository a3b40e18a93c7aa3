"""Find the control-plane binaries: $KUBEBUILDER_ASSETS first (the envtest convention), then the
versioned cache that hack/build-control-plane.sh fills (building it on first use)."""

from __future__ import annotations

import os
import pathlib
import subprocess

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"


class MissingBinaries(RuntimeError):
    pass


def find_binaries() -> dict[str, pathlib.Path]:
    """Path of every binary the local cluster needs, plus helm and the LWS CRD when built."""
    built = _build_cache()
    folders = [pathlib.Path(p) for p in [os.environ.get("KUBEBUILDER_ASSETS")] if p] + [built]
    found: dict[str, pathlib.Path] = {}
    for name in (*REQUIRED, "helm", "lws-crd.yaml"):
        for folder in folders:
            if (folder / name).is_file():
                found[name] = folder / name
                break
    missing = [n for n in REQUIRED if n not in found]
    if missing:
        raise MissingBinaries(f"missing {', '.join(missing)} (looked in {', '.join(map(str, folders))})")
    return found


def _build_cache() -> pathlib.Path:
    """Run the build script: instant when the cache is complete, many minutes when cold."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise MissingBinaries(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
    return pathlib.Path(result.stdout.strip().splitlines()[-1])
