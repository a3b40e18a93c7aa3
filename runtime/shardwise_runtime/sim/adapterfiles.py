"""What a LoRA path holds, read the way vLLM's worker reads it: a folder, or a hub id to fetch.

vLLM takes the rank from `adapter_config.json` ("r") and refuses a path where that file is absent
("No adapter found"), whether the path is a missing folder or a hub id it could not download. A hub
id is fetched from HF_ENDPOINT only when that is the local hub (`sim.hub`, on loopback: the
simulator never reaches a real network); with any other endpoint the simulator cannot look, so it
takes the id on trust with PEFT's default rank. Blocking I/O: the engine calls it in a thread.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import urllib.error
import urllib.request

from shardwise_runtime.sim import loopback

CONFIG = "adapter_config.json"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")
PEFT_DEFAULT_RANK = 8
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclasses.dataclass(frozen=True)
class AdapterFiles:
    """An adapter that was found: its rank and whether it has weights next to its config."""

    rank: int
    has_weights: bool


def _rank(config_text: str) -> int:
    # A config vLLM could not parse fails the load elsewhere; here it reads as PEFT's default.
    try:
        rank = json.loads(config_text).get("r", PEFT_DEFAULT_RANK)
    except (ValueError, AttributeError):
        return PEFT_DEFAULT_RANK
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else PEFT_DEFAULT_RANK


def is_hub_id(path: str) -> bool:
    """`owner/name`, as huggingface_hub accepts a repository id (and no local path looks)."""
    return bool(_HUB_ID.match(path)) and ".." not in path.split("/")


def _local(folder: pathlib.Path) -> AdapterFiles | None:
    config = folder / CONFIG
    if not config.is_file():
        return None
    return AdapterFiles(
        _rank(config.read_text(encoding="utf-8", errors="replace")),
        any((folder / name).is_file() for name in WEIGHTS),
    )


def _hub_file(
    endpoint: str, repo: str, name: str, timeout_s: float, method: str = "GET"
) -> bytes | None:
    url = f"{endpoint.rstrip('/')}/{repo}/resolve/main/{name}"
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return bytes(response.read())
    except (urllib.error.URLError, OSError):
        return None  # not found, gated or unreachable: all "No adapter found" to vLLM


def _hub(repo: str, endpoint: str | None, offline: bool, timeout_s: float) -> AdapterFiles | None:
    if offline:
        return None  # HF_HUB_OFFLINE: vLLM looks only in a cache the simulator does not have
    if endpoint is None or not _is_loopback_url(endpoint):
        return AdapterFiles(PEFT_DEFAULT_RANK, True)
    config = _hub_file(endpoint, repo, CONFIG, timeout_s)
    if config is None:
        return None
    # HEAD: whether the weights are there is all the simulator needs, not their bytes.
    has_weights = any(
        _hub_file(endpoint, repo, name, timeout_s, "HEAD") is not None for name in WEIGHTS
    )
    return AdapterFiles(_rank(config.decode("utf-8", errors="replace")), has_weights)


def _is_loopback_url(url: str) -> bool:
    try:
        loopback.require_loopback_url(url)
    except ValueError:
        return False
    return True


def inspect(
    path: str,
    *,
    hub_endpoint: str | None = None,
    hub_offline: bool = False,
    timeout_s: float = 10.0,
    mounts: tuple[tuple[str, str], ...] = (),
) -> AdapterFiles | None:
    """The adapter at `path` (a folder, else a hub id), or None where vLLM finds none; a path under
    one of the pod's `mounts` is read from the volume's local folder."""
    folder = pathlib.Path(remap(path, mounts))
    if folder.is_dir():
        return _local(folder)
    if folder.exists() or not is_hub_id(path):
        return None
    return _hub(path, hub_endpoint, hub_offline, timeout_s)


def remap(path: str, mounts: tuple[tuple[str, str], ...]) -> str:
    """`path` inside the container -> on this machine, through the longest mount that holds it."""
    for mount_path, local in sorted(mounts, key=lambda m: -len(m[0])):
        base = mount_path.rstrip("/")
        if path == base or path.startswith(base + "/"):
            return local + path[len(base):]
    return path
