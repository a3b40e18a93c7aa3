"""Labels for every recorded topology, and the decisions behind them."""

import dataclasses
from importlib import resources
from pathlib import Path

import pytest

from shardwise_runtime.topology import derive, nvml, recorded

TEST_COPIES = Path(__file__).parents[2] / "fixtures" / "topologies"


def summary_of(name: str) -> derive.Summary:
    return derive.summarize(derive.read_topology(recorded.load_recorded(name)))


@pytest.mark.parametrize("name, size, interconnect, gbps", [
    ("dgx-h100", "8", "nvswitch", "900"),
    ("dgx-a100", "8", "nvswitch", "600"),
    ("l40s-8x", "1", "pcie", "0"),
    ("a100-pcie-4x-bridged", "2", "nvlink", "600"),
    ("dual-socket-2x4", "4", "nvlink", "600"),
    ("h100-link-down", "8", "nvswitch", "850"),
    ("gb200-nvl72", "4", "nvswitch", "1800"),
])
def test_labels_of_each_recorded_topology(name: str, size: str, interconnect: str,
                                          gbps: str) -> None:
    summary = summary_of(name)
    assert derive.build_labels(summary) == {
        derive.DOMAIN_SIZE: size,
        derive.INTERCONNECT: interconnect,
        derive.BANDWIDTH: gbps,
        derive.FINGERPRINT: summary.fingerprint,
    }


def test_every_recording_is_tested_and_the_test_copies_match_the_packaged_ones() -> None:
    names = recorded.recorded_names()
    assert len(names) == 7
    for name in names:
        packaged = resources.files("shardwise_runtime.topology").joinpath(f"fixtures/{name}.yaml")
        assert (TEST_COPIES / f"{name}.yaml").read_text() == packaged.read_text(), name


def test_domains_follow_bridges_and_sockets() -> None:
    assert [sorted(d) for d in summary_of("a100-pcie-4x-bridged").domains] == [[0, 1], [2, 3]]
    assert [sorted(d) for d in summary_of("dual-socket-2x4").domains] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(summary_of("l40s-8x").domains) == 8


def test_a_link_down_is_reported_and_changes_the_fingerprint() -> None:
    down = summary_of("h100-link-down")
    assert down.inactive_links == ((3, 4),)
    assert down.fingerprint != summary_of("dgx-h100").fingerprint


def test_a_gpu_off_the_fabric_leaves_the_domain() -> None:
    topology = derive.read_topology(recorded.load_recorded("dgx-h100"))
    gpus = list(topology.gpus)
    gpus[5] = dataclasses.replace(gpus[5], links=tuple(
        nvml.NvLink(link=x.link, active=False) for x in gpus[5].links))
    ok = frozenset(p for p in topology.p2p_nvlink_ok if 5 not in p)
    summary = derive.summarize(derive.Topology(gpus=tuple(gpus), p2p_nvlink_ok=ok))
    assert summary.domain_size == 7
    assert summary.domains[0] == frozenset({0, 1, 2, 3, 4, 6, 7})
    assert summary.bandwidth_gbps == 900


def test_links_without_p2p_do_not_make_a_domain() -> None:
    # vLLM's test: NVLink present but P2P over it not OK is not fully connected.
    topology = derive.read_topology(recorded.load_recorded("a100-pcie-4x-bridged"))
    summary = derive.summarize(dataclasses.replace(topology, p2p_nvlink_ok=frozenset()))
    assert (summary.domain_size, summary.interconnect, summary.bandwidth_gbps) == (1, "pcie", 0)


def test_unknown_nvlink_version_leaves_the_bandwidth_label_out() -> None:
    topology = derive.read_topology(recorded.load_recorded("a100-pcie-4x-bridged"))
    gpus = tuple(dataclasses.replace(g, links=tuple(dataclasses.replace(x, version=99)
                                                    for x in g.links)) for g in topology.gpus)
    labels = derive.build_labels(derive.summarize(dataclasses.replace(topology, gpus=gpus)))
    assert derive.BANDWIDTH not in labels
    assert labels[derive.INTERCONNECT] == "nvlink"


@pytest.mark.parametrize("version, gbps", [(4, 50), (5, 50), (6, 50), (7, 100), (0, None)])
def test_link_rate_by_nvml_version(version: int, gbps: int | None) -> None:
    assert derive.link_gbps(nvml.NvLink(link=0, active=True, version=version)) == gbps


def test_fingerprint_is_stable_and_sees_the_fabric() -> None:
    first, again = summary_of("gb200-nvl72"), summary_of("gb200-nvl72")
    assert first.fingerprint == again.fingerprint
    assert len(first.fingerprint) == 12
    topology = derive.read_topology(recorded.load_recorded("gb200-nvl72"))
    moved = dataclasses.replace(topology, gpus=tuple(
        dataclasses.replace(g, fabric=nvml.Fabric(g.fabric.cluster_uuid, 1))  # type: ignore[union-attr]
        for g in topology.gpus))
    assert derive.fingerprint(moved) != first.fingerprint


def test_measured_bandwidth_is_a_rounded_label() -> None:
    labels = derive.build_labels(summary_of("dgx-h100"), measured_busbw_gbps=478.6)
    assert labels[derive.MEASURED_BUSBW] == "479"


@pytest.mark.parametrize("raw, normal", [
    ("00000000:18:00.0", "0000:18:00.0"),
    (b"0000:AB:00.0", "0000:ab:00.0"),
    ("00000009:01:00.0", "0009:01:00.0"),
])
def test_bus_ids_compare_across_nvml_widths(raw: str | bytes, normal: str) -> None:
    assert nvml.normalize_bus_id(raw) == normal


def test_unknown_recording_names_the_known_ones() -> None:
    with pytest.raises(FileNotFoundError, match="dgx-h100"):
        recorded.load_recorded("dgx-h1000")
