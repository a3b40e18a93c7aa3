"""The unused-cache collection shell against a recording fake of the API."""

from __future__ import annotations

import datetime
from typing import Any

from shardwise.controller import modelcache
from shardwise.controller.settings import Settings
from shardwise.render import modelcache as mc

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
SETTINGS = Settings(model_cache_grace_seconds=60.0)


class FakeKube:
    def __init__(self, claims: list[dict[str, Any]]) -> None:
        self.claims = claims
        self.calls: list[tuple[str, str]] = []

    def list_cache_claims(self, label: str) -> list[dict[str, Any]]:
        assert label == mc.CACHE_LABEL
        return self.claims

    def patch_metadata(self, obj: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.calls.append(("PATCH", obj["metadata"]["name"]))

    def get_live(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace, "uid": "j"}}

    def delete_owned(self, obj: dict[str, Any]) -> None:
        self.calls.append(("DELETE " + obj["kind"], obj["metadata"]["name"]))


def claim(namespace: str, name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": "c", "annotations": annotations}}


def infd(namespace: str, model: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": "x"}, "spec": {"model": {"name": model, "cache": {"mode": "Cluster"}}}}


def test_marks_unused_keeps_used_and_deletes_the_job_before_the_claim() -> None:
    """Claims in namespaces this operator does not watch are left alone (their users are unseen)."""
    used_ref = modelcache.resolve(SETTINGS, modelcache.api.InferenceDeploymentSpec.model_validate(infd("a", "org/m")["spec"]))
    old = (NOW - datetime.timedelta(seconds=120)).isoformat().replace("+00:00", "Z")
    kube = FakeKube([claim("a", used_ref.claim or ""), claim("a", "model-cache-new"),
                     claim("a", "model-cache-old", **{mc.UNUSED_SINCE_ANNOTATION: old}),
                     claim("other", "model-cache-elsewhere", **{mc.UNUSED_SINCE_ANNOTATION: old})])
    done = modelcache.collect_unused(kube, SETTINGS, [infd("a", "org/m")], NOW,  # type: ignore[arg-type]
                                     watched=lambda ns: ns == "a")
    assert done == ["mark a/model-cache-new", "delete a/model-cache-old"]
    assert kube.calls == [("PATCH", "model-cache-new"), ("DELETE Job", "model-cache-old-download"),
                          ("DELETE PersistentVolumeClaim", "model-cache-old")]
