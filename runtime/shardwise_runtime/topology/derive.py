"""From what NVML reports to NVLink domains and the node labels shardwise owns (pure).

An NVLink domain is a set of GPUs in which every pair is NVLink-connected and the driver reports
peer-to-peer over NVLink as OK: the same test vLLM applies before it treats GPUs as fully
connected (vllm/platforms/cuda.py `is_fully_connected`). A pair is connected by a direct link,
or through NVSwitch when both GPUs have active links to switches. Switches are not matched by
their PCI bus id: on Hopper and later the NVSwitches are not ordinary PCI functions of the host
and their reported ids differ between drivers, so the driver's P2P answer is what separates
GPUs on different switch fabrics.

Labels (all values strings, like every node label):
- shardwise.io/nvlink-domain-size: GPUs in the largest domain ("1" when there is no NVLink).
- shardwise.io/gpu-interconnect: `nvswitch` when the largest domain is joined through switches,
  `nvlink` when by direct links only (bridges, 4-GPU boards), `pcie` when no domain exceeds 1.
- shardwise.io/nvlink-bandwidth-gbps: per-GPU NVLink bandwidth inside the largest domain in GB/s,
  both directions summed (the datasheet convention: A100 600, H100 900, B200 1800): active links
  to the domain times the per-link rate of their NVLink generation, minimum over the domain's
  GPUs because a tensor-parallel all-reduce runs at its slowest member. "0" on PCIe-only nodes;
  absent when a link reports a generation this table does not know.
- shardwise.io/topology-fingerprint: 12 hex digits of a hash of everything above was read from,
  so a changed link, GPU or fabric is visible on the node object.

A GPU with a link down keeps its domain as long as P2P over NVLink still works (the remaining
links carry the traffic) but lowers the bandwidth label: a DGX H100 with one link down reads
8 GPUs, nvswitch, 850. A GPU whose links are all down fails the P2P test and leaves the domain.

Multi-node NVLink (GB200 NVL72): the labels describe this node's GPUs only. Which nodes share
an NVLink fabric is already published by GPU Feature Discovery as `nvidia.com/gpu.clique`
(`<ClusterUUID>.<CliqueID>`); shardwise does not duplicate it, and the planner reads it beside
these labels. The clique does enter the fingerprint, so re-partitioning the fabric relabels.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from shardwise_runtime.topology import nvml

DOMAIN_SIZE = "shardwise.io/nvlink-domain-size"
INTERCONNECT = "shardwise.io/gpu-interconnect"
BANDWIDTH = "shardwise.io/nvlink-bandwidth-gbps"
FINGERPRINT = "shardwise.io/topology-fingerprint"
MEASURED_BUSBW = "shardwise.io/nvlink-measured-busbw-gbps"
OWNED_LABELS = (DOMAIN_SIZE, INTERCONNECT, BANDWIDTH, FINGERPRINT, MEASURED_BUSBW)

# nvmlNvlinkVersion_t -> NVLink generation. 3.1 and 2.2 are revisions of generations 3 and 2.
_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5}

# GB/s per link, both directions summed, by NVLink generation (NVIDIA datasheets):
# P100 4 links 160 GB/s; V100 6 links 300; A100 12 links 600; H100/H200 18 links 900;
# B200 18 links 1800. Generations 2 to 4 share 50 GB/s, which also keeps the figure right for
# drivers older than the nvmlNvlinkVersion_t enum that reported the bare generation number.
LINK_GBPS = {1: 40, 2: 50, 3: 50, 4: 50, 5: 100}


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    bus_id: str
    links: tuple[nvml.NvLink, ...]
    fabric: nvml.Fabric | None = None


@dataclasses.dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    # Index pairs (low, high) for which P2P over NVLink reports OK.
    p2p_nvlink_ok: frozenset[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Summary:
    domains: tuple[frozenset[int], ...]  # maximal NVLink domains, largest first
    domain_size: int
    interconnect: str
    bandwidth_gbps: int | None
    fingerprint: str
    inactive_links: tuple[tuple[int, int], ...]  # (gpu, link) pairs that exist but are down


def read_topology(source: nvml.NvmlSource) -> Topology:
    """Ask the source everything the derivation needs, once."""
    count = source.device_count()
    gpus = tuple(Gpu(index=i, bus_id=nvml.normalize_bus_id(source.pci_bus_id(i)),
                     links=tuple(source.nvlinks(i)), fabric=source.fabric(i))
                 for i in range(count))
    ok = frozenset((a, b) for a in range(count) for b in range(a + 1, count)
                   if source.p2p_nvlink_ok(a, b))
    return Topology(gpus=gpus, p2p_nvlink_ok=ok)


def link_gbps(link: nvml.NvLink) -> int | None:
    generation = _GENERATION.get(link.version)
    return None if generation is None else LINK_GBPS.get(generation)


def summarize(topology: Topology) -> Summary:
    domains = nvlink_domains(topology)
    largest = [d for d in domains if len(d) == len(domains[0])] if domains else []
    size = len(largest[0]) if largest else 0
    bandwidth: int | None = 0
    if size <= 1:
        interconnect = "pcie"
    else:
        interconnect = "nvswitch" if any(_via_switch(topology, d) for d in largest) else "nvlink"
        rates = [_domain_gbps(topology, d) for d in largest]
        bandwidth = None if None in rates else min(r for r in rates if r is not None)
    inactive = tuple((g.index, link.link) for g in topology.gpus for link in g.links
                     if not link.active)
    return Summary(domains=tuple(domains), domain_size=size, interconnect=interconnect,
                   bandwidth_gbps=bandwidth, fingerprint=fingerprint(topology),
                   inactive_links=inactive)


def build_labels(summary: Summary, measured_busbw_gbps: float | None = None) -> dict[str, str]:
    labels = {
        DOMAIN_SIZE: str(summary.domain_size),
        INTERCONNECT: summary.interconnect,
        FINGERPRINT: summary.fingerprint,
    }
    if summary.bandwidth_gbps is not None:
        labels[BANDWIDTH] = str(summary.bandwidth_gbps)
    if measured_busbw_gbps is not None:
        labels[MEASURED_BUSBW] = str(round(measured_busbw_gbps))
    return labels


def nvlink_domains(topology: Topology) -> list[frozenset[int]]:
    """Maximal sets of mutually connected GPUs, largest first (ties by lowest index)."""
    neighbours = {g.index: {h.index for h in topology.gpus
                            if h.index != g.index and _connected(topology, g, h)}
                  for g in topology.gpus}
    cliques: list[frozenset[int]] = []
    _bron_kerbosch(set(), set(neighbours), set(), neighbours, cliques)
    return sorted(cliques, key=lambda c: (-len(c), sorted(c)))


def fingerprint(topology: Topology) -> str:
    canonical = {
        "gpus": [[g.bus_id,
                  [[x.link, x.active, x.remote_bus_id, x.remote_type.value, x.version]
                   for x in g.links],
                  None if g.fabric is None else [g.fabric.cluster_uuid, g.fabric.clique_id]]
                 for g in topology.gpus],
        "p2p_nvlink_ok": sorted(topology.p2p_nvlink_ok),
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:12]


def _bron_kerbosch(r: set[int], p: set[int], x: set[int], neighbours: dict[int, set[int]],
                   out: list[frozenset[int]]) -> None:
    # Exact maximal cliques; nodes hold at most a few dozen GPUs, so no cleverness is needed.
    if not p and not x:
        out.append(frozenset(r))
        return
    pivot = max(p | x, key=lambda v: len(neighbours[v] & p))
    for v in sorted(p - neighbours[pivot]):
        _bron_kerbosch(r | {v}, p & neighbours[v], x & neighbours[v], neighbours, out)
        p = p - {v}
        x = x | {v}


def _connected(topology: Topology, a: Gpu, b: Gpu) -> bool:
    pair = (min(a.index, b.index), max(a.index, b.index))
    if pair not in topology.p2p_nvlink_ok:
        return False
    direct = any(_peer(link, b) for link in a.links) or any(_peer(link, a) for link in b.links)
    return direct or (_has_switch_link(a) and _has_switch_link(b))


def _peer(link: nvml.NvLink, gpu: Gpu) -> bool:
    # Older drivers do not report the remote type; a remote bus id that is a local GPU decides.
    return (link.active and link.remote_type is not nvml.RemoteType.SWITCH
            and link.remote_bus_id == gpu.bus_id)


def _has_switch_link(gpu: Gpu) -> bool:
    return any(x.active and x.remote_type is nvml.RemoteType.SWITCH for x in gpu.links)


def _via_switch(topology: Topology, domain: frozenset[int]) -> bool:
    return all(_has_switch_link(topology.gpus[i]) for i in domain)


def _domain_gbps(topology: Topology, domain: frozenset[int]) -> int | None:
    members = [topology.gpus[i] for i in sorted(domain)]
    per_gpu = []
    for gpu in members:
        rates = [link_gbps(x) for x in gpu.links
                 if x.active and (x.remote_type is nvml.RemoteType.SWITCH
                                  or any(_peer(x, m) for m in members))]
        if None in rates:
            return None
        per_gpu.append(sum(r for r in rates if r is not None))
    return min(per_gpu)
