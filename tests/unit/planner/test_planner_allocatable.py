"""Plan only on GPUs Kubernetes can allocate: labels describe the hardware, allocatable decides.

A node whose GPU Feature Discovery labels show GPUs but whose status.allocatable has no (or 0)
nvidia.com/gpu has no device plugin serving it yet; the scheduler would never place a GPU pod there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from planner_builders import h100_node, spec
from shardwise import planner
from shardwise.planner import cli

NODES = Path(__file__).resolve().parents[2] / "fixtures" / "nodes"


def _without_allocatable(node: dict[str, Any], value: str | None) -> dict[str, Any]:
    """The node as the device plugin leaves it before registering: labels kept, no GPU resource
    (value None) or a 0 one, in both allocatable and capacity."""
    for resource in ("allocatable", "capacity"):
        if value is None:
            node["status"][resource].pop("nvidia.com/gpu")
        else:
            node["status"][resource]["nvidia.com/gpu"] = value
    return node


def _plan(nodes: list[dict[str, Any]], model: str = "meta-llama/Llama-3.1-8B-Instruct") -> planner.Plan:
    request = planner.request_from_spec(spec(model))
    return planner.plan(request, planner.inventory_from_nodes(nodes))


@pytest.mark.parametrize("value", [None, "0"])
def test_a_node_with_gpus_by_label_but_none_allocatable_is_not_planned_on(value: str | None) -> None:
    nodes = [_without_allocatable(h100_node("h100-plugin-down"), value)]
    inv = planner.inventory_from_nodes(nodes)
    assert inv.pools == () and inv.unallocatable == ("h100-plugin-down",)
    result = _plan(nodes)
    assert not result.feasible and result.tensor_parallel is None
    assert "device plugin not ready: allocatable nvidia.com/gpu is 0 on h100-plugin-down" in result.reason


def test_the_plan_goes_to_the_allocatable_node_and_names_the_other() -> None:
    nodes = [_without_allocatable(h100_node("h100-a"), None), h100_node("h100-b")]
    result = _plan(nodes)
    assert result.feasible and result.schedulable_now
    assert "h100-b" in (result.capacity_message or "") and "h100-a" not in (result.capacity_message or "")
    assert "allocatable nvidia.com/gpu is 0 on h100-a" in result.reason


def test_without_such_nodes_the_reason_is_unchanged() -> None:
    nodes = [h100_node("h100-b")]
    from shardwise.planner import search

    request = planner.request_from_spec(spec("meta-llama/Llama-3.1-8B-Instruct"))
    inv = planner.inventory_from_nodes(nodes)
    assert planner.plan(request, inv).reason == search.plan(request, inv).reason
    assert "device plugin" not in planner.plan(request, inv).reason


def test_many_such_nodes_are_counted_and_the_first_named() -> None:
    nodes = [_without_allocatable(h100_node(f"h100-{i:02d}"), None) for i in range(8)]
    result = _plan(nodes)
    assert "8 GPU node(s)" in result.reason and "h100-00" in result.reason
    assert "and 3 more" in result.reason


def test_offline_nodes_file_names_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = yaml.safe_load((NODES / "h100-nvswitch-2x8.yaml").read_text())["items"]
    first = items[0]
    first["status"]["allocatable"].pop("nvidia.com/gpu")
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    deployment = Path(__file__).resolve().parents[2] / "fixtures" / "deployments" / "llama-3.1-8b.yaml"
    code = cli.main(["plan", "-f", str(deployment), "--nodes", str(nodes_file), "-o", "json"])
    out = capsys.readouterr().out
    assert code == 0
    name = first["metadata"]["name"]
    assert f"device plugin not ready: allocatable nvidia.com/gpu is 0 on {name}" in out
