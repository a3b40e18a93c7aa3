"""Cache state from what the shell read: pure."""

from __future__ import annotations

import datetime
import json

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import cachestate
from shardwise.render import modelcache as mc

REF = mc.resolve(InferenceDeploymentSpec.model_validate(
    {"model": {"name": "org/model", "cache": {"mode": "Cluster", "storageClassName": "fast"}}}))
BOUND = {"metadata": {"name": REF.claim, "annotations": {}}, "status": {"phase": "Bound"}}


def pod(phase: str, message: dict | None = None, created: str = "2026-01-01T00:00:00Z") -> dict:
    state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 2, "message": json.dumps(message)}} \
        if message else {"running": {}}
    return {"metadata": {"name": "p", "creationTimestamp": created},
            "status": {"phase": phase, "containerStatuses": [{"name": "download", "state": state}]}}


def job(condition: str | None) -> dict:
    return {"status": {"conditions": [{"type": condition, "status": "True", "message": "m"}] if condition else []}}


def view(**kw: object) -> cachestate.CacheView:
    args = {"claim": BOUND, "storage_class_found": True, "claim_events": [], "job": job(None), "pods": [],
            "scraped": None, **kw}
    return cachestate.view(REF, **args)  # type: ignore[arg-type]


def test_missing_storage_class_fails_before_anything_exists() -> None:
    v = view(claim=None, storage_class_found=False, job=None)
    assert (v.phase, v.reason) == ("Failed", "StorageClassNotFound") and "'fast'" in v.message


def test_progress_while_downloading() -> None:
    scraped = {"state": "Downloading", "commit": "c" * 40, "bytesTotal": 1000, "bytesDone": 370,
               "bytesPerSecond": 10, "etaSeconds": 240}
    v = view(pods=[pod("Running")], scraped=scraped)
    assert v.phase == "Downloading" and v.progress["percent"] == 37 and not v.ready
    fields = cachestate.status_fields(REF, v, expected_start_s=61)
    assert fields["summary"] == "37% 4m left"
    assert "370 B of 1.0 KB" in v.message


def test_complete_and_verified_is_ready_with_the_commit_pinned() -> None:
    done = {"state": "Complete", "commit": "a" * 40, "bytes": 1000, "files": 3, "verified": True}
    v = view(job=job("Complete"), pods=[pod("Succeeded", done)])
    assert v.ready and v.commit == "a" * 40 and v.progress["percent"] == 100
    unverified = view(job=job("Complete"), pods=[pod("Succeeded", {"state": "Complete"})])
    assert (unverified.phase, unverified.reason) == ("Failed", "DownloadUnverified")


def test_claim_annotations_are_the_durable_record() -> None:
    claim = {"metadata": {"annotations": {mc.PHASE_ANNOTATION: "Ready", mc.COMMIT_ANNOTATION: "b" * 40,
                                          mc.BYTES_ANNOTATION: "42"}}, "status": {"phase": "Bound"}}
    v = view(claim=claim, job=None)
    assert v.ready and v.commit == "b" * 40


def test_failed_job_carries_the_downloaders_reason() -> None:
    failure = {"state": "Failed", "reason": "GatedModelNeedsToken", "message": "org/model is gated"}
    v = view(job=job("Failed"), pods=[pod("Failed", failure)])
    assert (v.phase, v.reason, v.message) == ("Failed", "GatedModelNeedsToken", "org/model is gated")


def test_unbound_claim_with_access_mode_trouble() -> None:
    events = [{"reason": "ProvisioningFailed", "message": "failed to provision volume: access mode ReadWriteMany "
                                                         "is not supported"}]
    v = view(claim={"metadata": {}, "status": {"phase": "Pending"}}, claim_events=events)
    assert (v.phase, v.reason) == ("Failed", "AccessModeUnsupported")


def test_gated_status_blocks_ready_and_explains() -> None:
    v = view(pods=[pod("Running")], scraped={"bytesTotal": 10, "bytesDone": 5, "bytesPerSecond": 1, "etaSeconds": 5})
    update = cachestate.gated_status({"conditions": []}, {}, v, generation=1, now="t")
    by_type = {c["type"]: c for c in update["conditions"]}
    assert update["phase"] == "Downloading"
    assert by_type["Ready"]["status"] == "False" and by_type["Progressing"]["status"] == "True"
    failed = cachestate.gated_status({"conditions": []}, {}, view(claim=None, storage_class_found=False), generation=1,
                                     now="t")
    assert failed["phase"] == "Failed"
    assert {c["type"]: c for c in failed["conditions"]}["Degraded"]["reason"] == "StorageClassNotFound"


def test_unused_claim_is_marked_then_deleted_after_grace_unless_kept() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    plain = {"metadata": {"annotations": {}}}
    assert cachestate.unused_decision(plain, True, now=now, grace_s=60) == "keep"
    assert cachestate.unused_decision(plain, False, now=now, grace_s=60) == "mark"
    marked = {"metadata": {"annotations": {mc.UNUSED_SINCE_ANNOTATION: "2026-01-01T00:00:00Z"}}}
    assert cachestate.unused_decision(marked, False, now=now + datetime.timedelta(seconds=30), grace_s=60) == "keep"
    assert cachestate.unused_decision(marked, False, now=now + datetime.timedelta(seconds=61), grace_s=60) == "delete"
    assert cachestate.unused_decision(marked, True, now=now, grace_s=60) == "unmark"
    kept = {"metadata": {"annotations": {mc.KEEP_ANNOTATION: "true", mc.UNUSED_SINCE_ANNOTATION: "2020-01-01T00:00:00Z"}}}
    assert cachestate.unused_decision(kept, False, now=now, grace_s=60) == "keep"
    assert cachestate.unused_decision(plain, False, now=now, grace_s=-1) == "keep"


def test_events_for_start_and_completion() -> None:
    down = {"modelCache": {"phase": "Downloading", "claim": "c", "revision": "main", "mode": "Cluster"}}
    ready = {"modelCache": {"phase": "Ready", "claim": "c", "commit": "x", "mode": "Cluster"}}
    assert [e[1] for e in cachestate.cache_events({}, down)] == ["DownloadStarted"]
    assert [e[1] for e in cachestate.cache_events(down, ready)] == ["WeightsCached"]
    assert cachestate.cache_events(ready, ready) == []


def test_statically_provisioned_storage_waits_for_a_volume_instead_of_failing() -> None:
    events = [{"reason": "ProvisioningFailed", "message": "no volume plugin matched name: kubernetes.io/no-provisioner"}]
    v = view(claim={"metadata": {}, "status": {"phase": "Pending"}}, claim_events=events)
    assert (v.phase, v.reason) == ("Pending", "WaitingForVolume")
    broken = [{"reason": "ProvisioningFailed", "message": "quota exceeded"}]
    v = view(claim={"metadata": {}, "status": {"phase": "Pending"}}, claim_events=broken)
    assert (v.phase, v.reason, v.message) == ("Failed", "ClaimProvisioningFailed", "quota exceeded")


def test_a_prefilled_claim_is_used_as_it_is_once_bound() -> None:
    ref = mc.resolve(InferenceDeploymentSpec.model_validate(
        {"model": {"name": "org/model", "cache": {"mode": "PVC", "claimName": "mine", "path": "/llama/"}}}))
    assert (ref.claim, ref.model_path, ref.job) == ("mine", "/model-cache/llama", None)
    common = {"storage_class_found": None, "claim_events": [], "job": None, "pods": [], "scraped": None}
    assert cachestate.view(ref, claim=None, **common).reason == "ClaimNotFound"
    assert cachestate.view(ref, claim={"status": {"phase": "Pending"}}, **common).phase == "Pending"
    ready = cachestate.view(ref, claim={"status": {"phase": "Bound"}}, **common)
    assert ready.ready and ready.reason == "PrefilledClaim"
