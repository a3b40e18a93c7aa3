"""The few NVML answers the labeler needs, behind a Protocol, and the real pynvml source.

Why an interface: everything that decides labels is tested against recorded topologies
(`recorded.RecordedNvml`) on machines without GPUs; only this module talks to the driver, and it
imports pynvml lazily so the operator image and the tests never need the NVIDIA library.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no library, no driver, no GPUs); the text says why."""


class RemoteType(str, enum.Enum):
    """What is at the far end of an NVLink (nvmlNvLinkDeviceType_t)."""

    GPU = "gpu"
    SWITCH = "switch"
    OTHER = "other"


@dataclasses.dataclass(frozen=True)
class NvLink:
    """One NVLink of one GPU as NVML reports it."""

    link: int
    active: bool
    remote_bus_id: str = ""
    remote_type: RemoteType = RemoteType.OTHER
    # The raw nvmlNvlinkVersion_t value (NVML_NVLINK_VERSION_4_0 is 6), not the generation.
    version: int = 0


@dataclasses.dataclass(frozen=True)
class Fabric:
    """Multi-node NVLink fabric membership (GB200 NVL72 and the like)."""

    cluster_uuid: str
    clique_id: int


class NvmlSource(Protocol):
    """What the labeler asks NVML; GPUs are NVML indices."""

    def device_count(self) -> int: ...

    def pci_bus_id(self, gpu: int) -> str: ...

    def nvlinks(self, gpu: int) -> list[NvLink]:
        """Only the links that exist on this GPU, active or not."""
        ...

    def p2p_nvlink_ok(self, gpu_a: int, gpu_b: int) -> bool:
        """Whether the driver reports peer-to-peer over NVLink as OK for the pair."""
        ...

    def fabric(self, gpu: int) -> Fabric | None: ...


def normalize_bus_id(bus_id: str | bytes) -> str:
    """`00000000:18:00.0` and `0000:18:00.0` (NVML uses both widths) as `0000:18:00.0`."""
    text = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).strip().lower()
    parts = text.split(":")
    if len(parts) != 3:
        return text
    domain, bus, device_function = parts
    return f"{int(domain, 16):04x}:{bus}:{device_function}"


# Constants copied as integers: the NVML ABI fixes them, and some pynvml versions define
# NVML_P2P_CAPS_INDEX_READ as the tuple `0,`, so names from the module are not trusted here.
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0
_REMOTE_TYPES = {0: RemoteType.GPU, 2: RemoteType.SWITCH}
_FABRIC_STATE_COMPLETED = 3


class PynvmlSource:
    """NvmlSource backed by the driver through nvidia-ml-py."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as error:
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({error})") from error
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML did not initialise: {error}") from error
        self._nvml: Any = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(pynvml.nvmlDeviceGetCount())]

    def close(self) -> None:
        self._nvml.nvmlShutdown()

    def device_count(self) -> int:
        return len(self._handles)

    def pci_bus_id(self, gpu: int) -> str:
        return normalize_bus_id(self._nvml.nvmlDeviceGetPciInfo(self._handles[gpu]).busId)

    def nvlinks(self, gpu: int) -> list[NvLink]:
        nvml, handle = self._nvml, self._handles[gpu]
        links = []
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                # A link index the GPU does not have; GPUs without NVLink answer this for all.
                continue
            if state != nvml.NVML_FEATURE_ENABLED:
                links.append(NvLink(link=link, active=False))
                continue
            links.append(NvLink(
                link=link,
                active=True,
                remote_bus_id=self._optional(
                    lambda: normalize_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId),
                    ""),
                remote_type=_REMOTE_TYPES.get(
                    self._optional(lambda: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link), -1),
                    RemoteType.OTHER),
                version=self._optional(lambda: nvml.nvmlDeviceGetNvLinkVersion(handle, link), 0),
            ))
        return links

    def p2p_nvlink_ok(self, gpu_a: int, gpu_b: int) -> bool:
        status = self._optional(lambda: self._nvml.nvmlDeviceGetP2PStatus(
            self._handles[gpu_a], self._handles[gpu_b], _P2P_CAPS_INDEX_NVLINK), -1)
        return bool(status == _P2P_STATUS_OK)

    def fabric(self, gpu: int) -> Fabric | None:
        nvml = self._nvml
        info = nvml.c_nvmlGpuFabricInfo_t()
        try:
            nvml.nvmlDeviceGetGpuFabricInfo(self._handles[gpu], info)
        except (nvml.NVMLError, AttributeError):
            # Not a fabric GPU, or a driver/pynvml too old to know the call.
            return None
        if info.state != _FABRIC_STATE_COMPLETED or info.status != 0:
            return None
        return Fabric(cluster_uuid=_uuid(bytes(info.clusterUuid)), clique_id=int(info.cliqueId))

    def _optional(self, call: Any, default: Any) -> Any:
        """A secondary NVML query: older drivers answer NotSupported, which must not stop us."""
        try:
            return call()
        except self._nvml.NVMLError:
            return default


def _uuid(raw: bytes) -> str:
    hexa = raw.hex()
    return f"{hexa[:8]}-{hexa[8:12]}-{hexa[12:16]}-{hexa[16:20]}-{hexa[20:]}"
