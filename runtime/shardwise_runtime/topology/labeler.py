"""`shardwise-labeler`: the DaemonSet process that labels its own node with its NVLink topology.

Why a loop and not a one-shot: GPUs, links and fabrics change under a running node (a link
trains down, a GPU falls off the bus, the NVLink fabric is repartitioned). Every `--interval`
seconds the labeler re-reads NVML, which is cheap, and writes only when the labels it owns differ
from the node's (plus once at start, so that server-side apply drops labels a previous version
owned and no longer sets). A changed fingerprint is logged, so the relabel is explained.

What it writes: `derive.OWNED_LABELS` on the node named by $NODE_NAME (downward API
`spec.nodeName`), by server-side apply with field manager `shardwise-labeler` and a Node patch
holding only metadata.labels, so the labels of GPU Feature Discovery and others stay theirs.
On a node without NVML or GPUs it labels nothing, logs why and tries again next interval; it
never exits in a loop. Kubernetes errors are logged and retried the same way.

RBAC (ClusterRole): apiGroups [""], resources ["nodes"], verbs ["get", "patch"]. Nothing else.

    shardwise-labeler [--interval 300] [--node-name NAME] [--fixture NAME|PATH]
                      [--measure-bandwidth [--bandwidth-cache PATH]] [--dry-run]

`--dry-run` prints `key=value` lines of the labels it would set and exits 0; with `--fixture`
(a packaged recording such as dgx-h100, or a YAML file) it needs neither GPUs nor a cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from shardwise_runtime.topology import bandwidth, derive, nvml, recorded

FIELD_MANAGER = "shardwise-labeler"
log = logging.getLogger("shardwise.labeler")


class Nodes(Protocol):
    """The two node operations the labeler's RBAC allows."""

    def get_labels(self, node: str) -> Mapping[str, str]: ...

    def apply_labels(self, node: str, labels: Mapping[str, str]) -> None: ...


class KubeNodes:
    """Nodes through the official Kubernetes client's CoreV1Api."""

    def __init__(self, api: Any) -> None:
        self._api = api

    @classmethod
    def from_environment(cls) -> KubeNodes:
        """In-cluster configuration (the DaemonSet), else the kubeconfig (a person testing)."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.CoreV1Api())

    def get_labels(self, node: str) -> Mapping[str, str]:
        metadata = self._api.read_node(node).metadata
        return (metadata.labels if metadata is not None else None) or {}

    def apply_labels(self, node: str, labels: Mapping[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": dict(labels)}}
        self._api.patch_node(node, body, field_manager=FIELD_MANAGER, force=True,
                             _content_type="application/apply-patch+yaml")


SourceFactory = Callable[[], nvml.NvmlSource]
Probe = Callable[[derive.Summary], float | None]


def read_summary(open_source: SourceFactory) -> derive.Summary:
    """The topology now; NvmlUnavailable (with the reason) when there is nothing to label."""
    source = open_source()
    try:
        if source.device_count() == 0:
            raise nvml.NvmlUnavailable("NVML sees no GPUs on this node")
        return derive.summarize(derive.read_topology(source))
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def desired_labels(open_source: SourceFactory, probe: Probe | None = None) -> dict[str, str]:
    summary = read_summary(open_source)
    if summary.inactive_links:
        log.warning("NVLinks down (gpu, link): %s", list(summary.inactive_links))
    measured = probe(summary) if probe is not None and summary.domain_size > 1 else None
    return derive.build_labels(summary, measured)


class Labeler:
    """One node's labeling state across checks: what it last applied."""

    def __init__(self, nodes: Nodes, node: str, open_source: SourceFactory,
                 probe: Probe | None = None) -> None:
        self._nodes, self._node = nodes, node
        self._open_source, self._probe = open_source, probe
        self._applied: dict[str, str] | None = None

    def check(self) -> bool:
        """Label the node if needed; True when it wrote. Never raises."""
        try:
            desired = desired_labels(self._open_source, self._probe)
        except nvml.NvmlUnavailable as why:
            log.warning("labeling nothing on %s: %s", self._node, why)
            return False
        except Exception:
            log.exception("reading the GPU topology failed; labeling nothing this time")
            return False
        try:
            return self._reconcile(desired)
        except Exception:
            log.exception("labeling node %s failed; retrying next interval", self._node)
            return False

    def _reconcile(self, desired: dict[str, str]) -> bool:
        current = self._nodes.get_labels(self._node)
        first = self._applied is None
        stale = set(self._applied or {}) - set(desired)
        if not first and not stale and all(current.get(k) == v for k, v in desired.items()):
            return False
        old = current.get(derive.FINGERPRINT)
        if old != desired[derive.FINGERPRINT]:
            log.info("topology fingerprint %s -> %s", old, desired[derive.FINGERPRINT])
        self._nodes.apply_labels(self._node, desired)
        self._applied = desired
        log.info("labeled node %s: %s", self._node, desired)
        return True


def run(labeler: Labeler, interval_s: float, sleep: Callable[[float], Any] = time.sleep,
        checks: int | None = None) -> None:
    """Check every interval_s seconds, forever unless `checks` bounds it."""
    done = 0
    while checks is None or done < checks:
        labeler.check()
        done += 1
        if checks is None or done < checks:
            sleep(interval_s)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shardwise-labeler", description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=300.0,
                        help="seconds between topology checks (default 300)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                        help="node to label (default $NODE_NAME)")
    parser.add_argument("--fixture", help="use a recorded topology (name or YAML path), not NVML")
    parser.add_argument("--measure-bandwidth", action="store_true",
                        help="also run the NCCL all-reduce probe once per topology (needs torch)")
    parser.add_argument("--bandwidth-cache", type=Path, default=bandwidth.DEFAULT_CACHE,
                        help=f"probe result cache (default {bandwidth.DEFAULT_CACHE})")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the labels it would set and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fixture = args.fixture
    open_source: SourceFactory = (
        (lambda: recorded.load_recorded(fixture)) if fixture else nvml.PynvmlSource)
    probe: Probe | None = None
    if args.measure_bandwidth:
        cache = args.bandwidth_cache

        def probe(summary: derive.Summary) -> float | None:
            return bandwidth.cached_busbw_gbps(summary.fingerprint, sorted(summary.domains[0]),
                                               cache)

    if args.dry_run:
        try:
            labels = desired_labels(open_source, probe)
        except FileNotFoundError as why:
            log.error("%s", why)
            return 64
        except nvml.NvmlUnavailable as why:
            log.warning("no labels: %s", why)
            return 0
        for key, value in sorted(labels.items()):
            print(f"{key}={value}")
        return 0
    if args.interval <= 0:
        log.error("--interval must be positive, got %g", args.interval)
        return 64
    if not args.node_name:
        log.error("no node to label: set NODE_NAME (downward API spec.nodeName) or --node-name")
        return 64
    run(Labeler(KubeNodes.from_environment(), args.node_name, open_source, probe), args.interval)
    return 0
