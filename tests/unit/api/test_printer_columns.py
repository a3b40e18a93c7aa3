"""`kubectl get infd -A` fits a 120-column terminal for the demo fleet; `-o wide` shows the rest.

kubectl prints with a tabwriter of minimum cell width 6 and padding 3
(k8s.io/cli-runtime/pkg/printers/tabwriter.go); the width is computed here the same way from the
CRD's own printer columns and the demo fleet (examples/), each given the widest values it
realistically shows: a Progressing phase, an age of five characters, four-digit TTFT.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from shardwise.api import crd

ROOT = pathlib.Path(__file__).resolve().parents[3]
MIN_WIDTH, PADDING = 6, 3

WIDE_STATUS = {
    "phase": "Progressing",
    "readyReplicas": 12, "replicas": 12, "desiredReplicas": 12,
    "plan": {"layout": "TP8xPP2", "gpuProduct": "NVIDIA-H100-80GB-HBM3"},
    "latency": {"ttftP95Ms": 1230, "itlP95Ms": 24.9, "outputTokensPerSecond": 1170},
    "cost": {"hourlyUSD": 19.92, "perMillionOutputTokensUSD": 11.2},
    "modelCache": {"summary": "cached"},
    "rollout": {"strategy": "RollingUpdate", "state": "Complete"},
}


def _demo_fleet() -> list[dict[str, Any]]:
    docs = [d for p in sorted(ROOT.glob("examples/**/*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    fleet = [d for d in docs if isinstance(d, dict) and d.get("kind") == "InferenceDeployment"]
    assert len(fleet) >= 5, [d.get("metadata", {}).get("name") for d in fleet]
    return fleet


def _columns(wide: bool) -> list[dict[str, Any]]:
    version = crd.build_crd()["spec"]["versions"][0]
    return [c for c in version["additionalPrinterColumns"] if wide or not c.get("priority")]


def _cell(obj: dict[str, Any], column: dict[str, Any]) -> str:
    if column["type"] == "date":
        return "5h12m"
    node: Any = obj
    for part in column["jsonPath"].lstrip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def _table(wide: bool) -> list[str]:
    columns = _columns(wide)
    rows = [["NAMESPACE", "NAME", *(c["name"].upper() for c in columns)]]
    for obj in _demo_fleet():
        obj = {**obj, "status": WIDE_STATUS}
        meta = obj["metadata"]
        rows.append([meta.get("namespace", "default"), meta["name"], *(_cell(obj, c) for c in columns)])
    widths = [max(MIN_WIDTH, max(len(r[i]) for r in rows) + PADDING) for i in range(len(rows[0]))]
    return ["".join(cell.ljust(w) for cell, w in zip(r[:-1], widths)) + r[-1] for r in rows]


def test_default_view_of_the_demo_fleet_fits_120_columns() -> None:
    lines = _table(wide=False)
    assert max(map(len, lines)) <= 120, "\n" + "\n".join(lines)
    header = lines[0].split()
    assert header == ["NAMESPACE", "NAME", "MODEL", "LAYOUT", "READY", "TTFT", "USD/H", "PHASE", "AGE"]


def test_wide_view_shows_every_other_column() -> None:
    header = _table(wide=True)[0].split()
    for wanted in ("REPLICAS", "DESIRED", "GPU", "ITL-P95", "TOK/S", "USD/1M", "DOWNLOAD", "ROLLOUT"):
        assert wanted in header
    assert all(c.get("priority", 0) in (0, 1) for c in _columns(wide=True))


def test_every_column_points_at_a_field_the_schema_has_or_the_plan_writes() -> None:
    status = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    for column in _columns(wide=True):
        path = column["jsonPath"].lstrip(".").split(".")
        if path[0] == "status":
            assert path[1] in status["properties"], column
        assert column["description"], column
