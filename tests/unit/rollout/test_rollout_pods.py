"""Which pods a template made, whatever the API server added to them."""

from __future__ import annotations

from typing import Any

from shardwise.rollout import pods


TEMPLATE = {"metadata": {"annotations": {"a": "1"}},
            "spec": {"containers": [{"name": "vllm", "image": "v:1", "args": ["--x"],
                                     "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                     "tolerations": [{"key": "k", "operator": "Exists"}]}}


def made_from(image: str, annotation: str = "1") -> dict[str, Any]:
    # What the API server makes of the template: defaults added, a token volume mounted, tolerations appended.
    return {"metadata": {"name": "p", "annotations": {"a": annotation, "kubectl.kubernetes.io/x": "y"}},
            "spec": {"nodeName": "n", "containers": [{"name": "vllm", "image": image, "args": ["--x"],
                                                      "imagePullPolicy": "IfNotPresent", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                                                       {"name": "token", "mountPath": "/var"}],
                                                      "resources": {"limits": {"nvidia.com/gpu": "1"},
                                                                    "requests": {"nvidia.com/gpu": "1"}}}],
                     "tolerations": [{"key": "k", "operator": "Exists"},
                                     {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]}}


def test_of_template_ignores_what_the_api_server_adds() -> None:
    assert pods.of_template(made_from("v:1"), TEMPLATE)
    assert not pods.of_template(made_from("v:2"), TEMPLATE)
    assert not pods.of_template(made_from("v:1", annotation="2"), TEMPLATE)
    renamed = made_from("v:1")
    renamed["spec"]["containers"][0]["name"] = "other"
    assert not pods.of_template(renamed, TEMPLATE)
