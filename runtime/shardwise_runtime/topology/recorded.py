"""NVML answers replayed from a recorded topology (YAML), for tests and `--fixture`.

Why: the derivation and the labeler must be testable without GPUs, and `shardwise-labeler
--dry-run --fixture dgx-h100` lets a person see the labels a machine type would get. The
recordings ship inside the package (topology/fixtures/*.yaml); tests/fixtures/topologies holds
the same files for the tests, and a test keeps the two copies equal.

Format (a recording states what NVML would answer, so versions are nvmlNvlinkVersion_t values):
    nvlink_version: 6                 # NVML_NVLINK_VERSION_4_0 (NVLink 4)
    fabric: {cluster_uuid: ..., clique_id: 1}   # optional, the same for every GPU
    p2p_nvlink_ok: [[0, 1, 2, 3]]     # groups whose every pair reports P2P over NVLink OK
    gpus:
      - bus_id: "00000000:18:00.0"
        links:                        # link indices are numbered from 0 in this order
          - {remote: "0000:03:00.0", type: switch, count: 5}
          - {remote: "0000:3a:00.0", type: gpu, count: 1, active: false}
Other top-level keys (`description`, `source`, `x-...` holding YAML anchors) are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from shardwise_runtime.topology import nvml


class RecordedNvml:
    """NvmlSource answering from a recording."""

    def __init__(self, recording: Mapping[str, Any]) -> None:
        self.description = str(recording.get("description", ""))
        version = int(recording.get("nvlink_version", 0))
        fabric = recording.get("fabric")
        self._fabric = None if not fabric else nvml.Fabric(
            cluster_uuid=str(fabric["cluster_uuid"]), clique_id=int(fabric["clique_id"]))
        self._bus_ids = [str(g["bus_id"]) for g in recording.get("gpus", [])]
        self._links = [_expand(g.get("links", []), version) for g in recording.get("gpus", [])]
        self._p2p_groups = [set(group) for group in recording.get("p2p_nvlink_ok", [])]

    def device_count(self) -> int:
        return len(self._bus_ids)

    def pci_bus_id(self, gpu: int) -> str:
        return self._bus_ids[gpu]

    def nvlinks(self, gpu: int) -> list[nvml.NvLink]:
        return list(self._links[gpu])

    def p2p_nvlink_ok(self, gpu_a: int, gpu_b: int) -> bool:
        return any(gpu_a in group and gpu_b in group for group in self._p2p_groups)

    def fabric(self, gpu: int) -> nvml.Fabric | None:
        return self._fabric


def recorded_names() -> list[str]:
    """The recordings shipped in the package."""
    folder = resources.files("shardwise_runtime.topology").joinpath("fixtures")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


def load_recorded(name_or_path: str) -> RecordedNvml:
    """A packaged recording by name (`dgx-h100`) or any recording file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") and path.exists():
        text = path.read_text()
    else:
        entry = resources.files("shardwise_runtime.topology").joinpath(
            f"fixtures/{name_or_path}.yaml")
        if not entry.is_file():
            raise FileNotFoundError(
                f"no recorded topology {name_or_path!r}; known: {', '.join(recorded_names())}")
        text = entry.read_text()
    return RecordedNvml(yaml.safe_load(text))


def _expand(groups: list[Mapping[str, Any]], version: int) -> list[nvml.NvLink]:
    links: list[nvml.NvLink] = []
    for group in groups:
        active = bool(group.get("active", True))
        for _ in range(int(group.get("count", 1))):
            links.append(nvml.NvLink(
                link=len(links),
                active=active,
                # NVML answers nothing about the far end of a link that is down.
                remote_bus_id=nvml.normalize_bus_id(str(group["remote"])) if active else "",
                remote_type=nvml.RemoteType(group["type"]) if active else nvml.RemoteType.OTHER,
                version=version if active else 0,
            ))
    return links
