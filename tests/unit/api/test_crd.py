"""The committed CRD is exactly what the pydantic models generate, and it is structural."""

import pathlib

import yaml

from shardwise.api import crd

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_committed_crd_matches_models() -> None:
    committed = (ROOT / "crds/inferencedeployments.shardwise.io.yaml").read_text()
    assert committed == crd.render_crd_yaml(), "crds/ is stale: run `make crds`"


def _walk(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_schema_is_structural_and_described() -> None:
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True, path
    spec_props = schema["properties"]["spec"]["properties"]
    for path, node in _walk(spec_props):
        if "type" in node and not path.endswith((".items", ".additionalProperties")):
            assert node.get("description"), f"{path} has no description for kubectl explain"


def test_scale_subresource_and_printer_columns() -> None:
    version = yaml.safe_load(crd.render_crd_yaml())["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    for wanted in ("Model", "Layout", "Ready", "TTFT", "USD/h", "Phase", "Age"):
        assert wanted in names
