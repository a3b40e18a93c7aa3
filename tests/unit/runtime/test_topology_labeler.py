"""The labeler's loop: what it writes, when it writes, and how it survives a node without GPUs."""

import logging
from collections.abc import Mapping

import pytest

from shardwise_runtime.topology import derive, labeler, nvml, recorded


class FakeNodes:
    """A node's labels under server-side apply: an apply replaces the fields its manager owns."""

    def __init__(self, labels: dict[str, str] | None = None, fail: bool = False,
                 owned: tuple[str, ...] = ()) -> None:
        self.labels = dict(labels or {})
        self.applies: list[dict[str, str]] = []
        self.fail = fail
        self.owned = set(owned)

    def get_labels(self, node: str) -> Mapping[str, str]:
        if self.fail:
            raise ConnectionError("API server unreachable")
        return self.labels

    def apply_labels(self, node: str, labels: Mapping[str, str]) -> None:
        self.applies.append(dict(labels))
        for key in self.owned - set(labels):
            del self.labels[key]
        self.owned = set(labels)
        self.labels.update(labels)


def fixture(name: str) -> labeler.SourceFactory:
    return lambda: recorded.load_recorded(name)


def no_nvml() -> nvml.NvmlSource:
    raise nvml.NvmlUnavailable("nvidia-ml-py is not installed")


def test_writes_once_then_only_when_the_topology_changes() -> None:
    nodes = FakeNodes({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    current = ["dgx-h100"]
    worker = labeler.Labeler(nodes, "gpu-1", lambda: recorded.load_recorded(current[0]))
    assert worker.check() is True
    assert worker.check() is False
    current[0] = "h100-link-down"
    assert worker.check() is True
    assert nodes.labels[derive.BANDWIDTH] == "850"
    assert nodes.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert len(nodes.applies) == 2


def test_a_hand_edit_of_an_owned_label_is_reverted() -> None:
    nodes = FakeNodes()
    worker = labeler.Labeler(nodes, "gpu-1", fixture("dgx-a100"))
    worker.check()
    nodes.labels[derive.DOMAIN_SIZE] = "4"
    assert worker.check() is True
    assert nodes.labels[derive.DOMAIN_SIZE] == "8"


def test_first_check_applies_even_when_labels_match_so_stale_fields_are_dropped() -> None:
    # A previous run measured bandwidth; this one does not: the label must go.
    wanted = labeler.desired_labels(fixture("l40s-8x"))
    nodes = FakeNodes({**wanted, derive.MEASURED_BUSBW: "123"},
                      owned=(*wanted, derive.MEASURED_BUSBW))
    assert labeler.Labeler(nodes, "gpu-1", fixture("l40s-8x")).check() is True
    assert derive.MEASURED_BUSBW not in nodes.labels


def test_without_nvml_it_labels_nothing_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    nodes = FakeNodes()
    with caplog.at_level(logging.WARNING):
        assert labeler.Labeler(nodes, "cpu-1", no_nvml).check() is False
    assert nodes.applies == []
    assert "nvidia-ml-py is not installed" in caplog.text


def test_a_node_where_nvml_sees_no_gpus_is_not_labeled(caplog: pytest.LogCaptureFixture) -> None:
    empty = lambda: recorded.RecordedNvml({"gpus": []})  # noqa: E731
    nodes = FakeNodes()
    assert labeler.Labeler(nodes, "cpu-1", empty).check() is False
    assert nodes.applies == [] and "no GPUs" in caplog.text


def test_api_errors_are_logged_and_retried_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    nodes = FakeNodes(fail=True)
    worker = labeler.Labeler(nodes, "gpu-1", fixture("dgx-h100"))
    assert worker.check() is False
    nodes.fail = False
    assert worker.check() is True
    assert "API server unreachable" in caplog.text


def test_run_sleeps_the_interval_between_checks() -> None:
    sleeps: list[float] = []
    nodes = FakeNodes()
    labeler.run(labeler.Labeler(nodes, "gpu-1", no_nvml), 300.0, sleep=sleeps.append, checks=3)
    assert sleeps == [300.0, 300.0]


def test_probe_result_becomes_a_label_only_with_a_domain() -> None:
    seen: list[str] = []

    def probe(summary: derive.Summary) -> float:
        seen.append(summary.fingerprint)
        return 700.4

    assert labeler.desired_labels(fixture("dgx-h100"), probe)[derive.MEASURED_BUSBW] == "700"
    assert derive.MEASURED_BUSBW not in labeler.desired_labels(fixture("l40s-8x"), probe)
    assert len(seen) == 1


def test_dry_run_prints_the_labels_of_a_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    assert labeler.main(["--dry-run", "--fixture", "dgx-h100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["shardwise.io/gpu-interconnect=nvswitch",
                         "shardwise.io/nvlink-bandwidth-gbps=900",
                         "shardwise.io/nvlink-domain-size=8"]
    assert lines[3].startswith("shardwise.io/topology-fingerprint=")


def test_dry_run_with_an_unknown_fixture_is_a_usage_error() -> None:
    assert labeler.main(["--dry-run", "--fixture", "no-such-machine"]) == 64


def test_without_a_node_name_it_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert labeler.main(["--fixture", "dgx-h100"]) == 64


def test_kube_nodes_applies_only_labels_server_side_as_the_labeler() -> None:
    calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    class Api:
        def patch_node(self, *args: object, **kwargs: object) -> None:
            calls.append((args, kwargs))

    labeler.KubeNodes(Api()).apply_labels("gpu-1", {derive.DOMAIN_SIZE: "8"})
    [(args, kwargs)] = calls
    assert args == ("gpu-1", {"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": "gpu-1",
                                           "labels": {derive.DOMAIN_SIZE: "8"}}})
    assert kwargs == {"field_manager": "shardwise-labeler", "force": True,
                      "_content_type": "application/apply-patch+yaml"}


def test_a_zero_interval_is_refused_rather_than_spinning() -> None:
    assert labeler.main(["--fixture", "dgx-h100", "--node-name", "gpu-1", "--interval", "0"]) == 64
