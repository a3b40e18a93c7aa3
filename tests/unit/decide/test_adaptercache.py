"""Where an adapter's files come from and their download into the model's cache claim."""

from __future__ import annotations

import json
from typing import Any

from shardwise.decide import adaptercache as ac
from shardwise.render import modelcache as mc

CLUSTER = mc.CacheRef("Cluster", claim="model-cache-abc", path="model", key="abc", model="org/base",
                      revision="main", endpoint="http://hub")
HUB = ac.Source("sql", repo="org/sql-lora", revision="v1")


def claim(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "model-cache-abc", "namespace": "ns", "uid": "u1", "annotations": annotations}}


def job(condition: str | None) -> dict[str, Any]:
    conds = [{"type": condition, "status": "True"}] if condition else []
    return {"metadata": {"name": ac.job_name("model-cache-abc", HUB)}, "status": {"conditions": conds}}


def pod(outcome: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"containerStatuses": [{"state": {"terminated": {"message": json.dumps(outcome)}}}]}}


def test_without_a_cache_the_engine_fetches_a_hub_adapter_by_its_id() -> None:
    where = ac.locate(HUB, mc.CacheRef("None", model="org/base"), cache_ready=True, claim=None, job=None, job_pods=[])
    assert where.path == "org/sql-lora" and where.download is None


def test_a_path_adapter_is_inside_the_models_claim_and_needs_one() -> None:
    local = ac.Source("x", path="/loras/x/")
    assert ac.locate(local, CLUSTER, cache_ready=True, claim=claim(), job=None, job_pods=[]).path == "/model-cache/loras/x"
    refused = ac.locate(local, mc.CacheRef("None", model="org/base"), cache_ready=True, claim=None, job=None, job_pods=[])
    assert refused.path is None and refused.reason == "AdapterNeedsClaim"


def test_a_hub_adapter_on_a_prefilled_claim_cannot_be_fetched() -> None:
    prefilled = mc.CacheRef("PVC", claim="mine", path="m", model="org/base")
    where = ac.locate(HUB, prefilled, cache_ready=True, claim=claim(), job=None, job_pods=[])
    assert where.path is None and where.reason == "AdapterNeedsCache" and "mine" in where.message


def test_the_download_waits_for_the_models_cache_then_starts_then_is_recorded() -> None:
    waiting = ac.locate(HUB, CLUSTER, cache_ready=False, claim=claim(), job=None, job_pods=[])
    assert (waiting.path, waiting.reason, waiting.download) == (None, "Downloading", None)
    start = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=None, job_pods=[])
    assert start.download == HUB and start.path is None
    running = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=job(None), job_pods=[])
    assert running.reason == "Downloading" and running.download is None
    done = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=job("Complete"),
                     job_pods=[pod({"state": "Complete", "verified": True, "commit": "c0ffee"})])
    assert done.path == f"/model-cache/adapters/{HUB.key}" and done.commit == "c0ffee"
    recorded = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(**{ac.ANNOTATION_PREFIX + HUB.key: "c0ffee"}),
                         job=None, job_pods=[])
    assert recorded.path == done.path and recorded.commit == "c0ffee"
    assert ac.record(claim(), HUB, "c0ffee")[1] == {"annotations": {ac.ANNOTATION_PREFIX + HUB.key: "c0ffee"}}


def test_an_unverified_or_failed_download_says_why() -> None:
    unverified = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=job("Complete"),
                           job_pods=[pod({"state": "Complete", "verified": False})])
    assert unverified.path is None and unverified.reason == "AdapterDownloadFailed"
    failed = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=job("Failed"),
                       job_pods=[pod({"state": "Failed", "reason": "RepoNotFound", "message": "no org/sql-lora"})])
    assert failed.reason == "AdapterDownloadFailed" and "RepoNotFound: no org/sql-lora" in failed.message


def test_the_job_is_the_model_downloader_pointed_at_the_adapters_folder_with_labels_of_its_own() -> None:
    built = ac.build_job(HUB, CLUSTER, "ns", "u1", image="img", token_secret=None)
    args = built["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--repo") + 1] == "org/sql-lora" and args[args.index("--revision") + 1] == "v1"
    assert args[args.index("--dest") + 1] == f"/model-cache/adapters/{HUB.key}"
    assert built["metadata"]["name"] == f"model-cache-abc-lora-{HUB.key}" and len(built["metadata"]["name"]) <= 63
    assert built["metadata"]["ownerReferences"][0]["uid"] == "u1"
    for labels in (built["metadata"]["labels"], built["spec"]["template"]["metadata"]["labels"]):
        # Never the model's own downloader to the model's cache (which reads pods by its key).
        assert labels[mc.CACHE_LABEL] != CLUSTER.key and labels[ac.JOB_LABEL] == HUB.key
    volumes = built["spec"]["template"]["spec"]["volumes"]
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache-abc"}} in volumes


def test_the_plan_creates_one_job_per_download_and_stamps_each_commit_once() -> None:
    twin = ac.Source("sql-copy", repo="org/sql-lora", revision="v1")  # same files: one Job
    other = ac.Source("chat", repo="org/chat-lora")
    common = dict(cache_ready=True, claim=claim(), namespace="ns", image="dl:1", token_secret=None)
    first = ac.plan([HUB, twin, other], CLUSTER, jobs={}, job_pods={}, **common)
    assert sorted(j["metadata"]["name"] for j in first.jobs) == sorted({ac.job_name("model-cache-abc", HUB),
                                                                       ac.job_name("model-cache-abc", other)})
    assert not first.records and {w.reason for w in first.where.values()} == {"Downloading"}
    verified = [pod({"state": "Complete", "verified": True, "commit": "c0ffee"})]
    done = ac.plan([HUB], CLUSTER, jobs={HUB.key: job("Complete")}, job_pods={HUB.key: verified}, **common)
    assert not done.jobs and done.where["sql"].commit == "c0ffee"
    (stamp,) = done.records
    assert stamp[1] == {"annotations": {ac.ANNOTATION_PREFIX + HUB.key: "c0ffee"}}
    stamped = claim(**{ac.ANNOTATION_PREFIX + HUB.key: "c0ffee"})
    later = ac.plan([HUB], CLUSTER, jobs={}, job_pods={}, **{**common, "claim": stamped})
    assert not later.jobs and not later.records and later.where["sql"].path == done.where["sql"].path


def test_job_reads_only_while_a_hub_download_is_on_its_way() -> None:
    assert ac.needs_job_reads(HUB, CLUSTER, claim())
    assert not ac.needs_job_reads(HUB, CLUSTER, claim(**{ac.ANNOTATION_PREFIX + HUB.key: "c"}))
    assert not ac.needs_job_reads(HUB, CLUSTER, None)  # the model's claim comes first
    assert not ac.needs_job_reads(ac.Source("x", path="loras/x"), CLUSTER, claim())
    assert not ac.needs_job_reads(HUB, mc.CacheRef("None", model="org/base"), None)


def test_ready_path_is_none_until_verified() -> None:
    assert ac.ready_path(HUB, CLUSTER, claim()) is None
    assert ac.ready_path(HUB, CLUSTER, claim(**{ac.ANNOTATION_PREFIX + HUB.key: "c"})) == \
        f"/model-cache/adapters/{HUB.key}"
    assert ac.ready_path(HUB, mc.CacheRef("None", model="org/base"), None) == "org/sql-lora"


def test_a_running_download_says_how_far_it_is() -> None:
    scraped = {"bytesTotal": 4_000_000, "bytesDone": 1_000_000, "bytesPerSecond": 500_000, "etaSeconds": 6,
               "state": "Downloading"}
    where = ac.locate(HUB, CLUSTER, cache_ready=True, claim=claim(), job=job(None), job_pods=[], progress=scraped)
    assert where.reason == "Downloading" and "25%" in where.message, where.message
