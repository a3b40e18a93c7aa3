"""PynvmlSource against a stand-in pynvml module: link probing, P2P index, missing NVML."""

import sys
import types
from typing import Any

import pytest

from shardwise_runtime.topology import derive, nvml


def fake_pynvml(p2p_calls: list[tuple[Any, Any, Any]]) -> types.ModuleType:
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_InvalidArgument(NVMLError):
        pass

    bus = {0: "00000000:17:00.0", 1: "00000000:31:00.0", 2: "00000000:B1:00.0"}
    # GPU 0: links 0 and 2 up to GPU 1, link 1 down, nothing past 2. GPU 1: the mirror.
    # GPU 2: no NVLink at all.
    links = {0: {0: 1, 1: 0, 2: 1}, 1: {0: 1, 1: 0, 2: 1}, 2: {}}

    def state(handle: int, link: int) -> int:
        if handle == 2:
            raise NVMLError_NotSupported()
        if link not in links[handle]:
            raise NVMLError_InvalidArgument()
        return links[handle][link]

    def remote_pci(handle: int, link: int) -> Any:
        return types.SimpleNamespace(busId=bus[1 - handle].encode())

    def p2p(a: int, b: int, index: Any) -> int:
        p2p_calls.append((a, b, index))
        return 0 if {a, b} == {0, 1} else 5

    def fabric(handle: int, info: Any) -> None:
        raise NVMLError_NotSupported()

    module.__dict__.update(
        NVMLError=NVMLError, NVMLError_NotSupported=NVMLError_NotSupported,
        NVMLError_InvalidArgument=NVMLError_InvalidArgument,
        NVML_NVLINK_MAX_LINKS=36, NVML_FEATURE_ENABLED=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 3, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=bus[h]),
        nvmlDeviceGetNvLinkState=state, nvmlDeviceGetNvLinkRemotePciInfo=remote_pci,
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: 0,
        nvmlDeviceGetNvLinkVersion=lambda h, link: 4,
        nvmlDeviceGetP2PStatus=p2p,
        c_nvmlGpuFabricInfo_t=lambda: types.SimpleNamespace(),
        nvmlDeviceGetGpuFabricInfo=fabric,
    )
    return module


def test_reads_existing_links_and_asks_p2p_over_nvlink_by_integer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, Any, Any]] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    source = nvml.PynvmlSource()
    assert [(x.link, x.active) for x in source.nvlinks(0)] == [(0, True), (1, False), (2, True)]
    assert source.nvlinks(0)[0] == nvml.NvLink(link=0, active=True, remote_bus_id="0000:31:00.0",
                                               remote_type=nvml.RemoteType.GPU, version=4)
    assert source.nvlinks(2) == []
    assert source.fabric(0) is None

    summary = derive.summarize(derive.read_topology(source))
    assert (summary.domain_size, summary.interconnect, summary.bandwidth_gbps) == (2, "nvlink", 100)
    assert calls and all(type(index) is int and index == 2 for _, _, index in calls)


def test_missing_library_is_reported_not_raised_as_import_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(nvml.NvmlUnavailable, match="not installed"):
        nvml.PynvmlSource()


def test_driver_that_does_not_load_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_pynvml([])

    def fail() -> None:
        raise module.NVMLError("Driver Not Loaded")

    module.nvmlInit = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    with pytest.raises(nvml.NvmlUnavailable, match="Driver Not Loaded"):
        nvml.PynvmlSource()
