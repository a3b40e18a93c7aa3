"""Where each LoRA adapter's files come from, and their download into the model cache: pure.

An adapter from the hub is downloaded once into the base model's cache claim (the claim serving
pods already mount read-only), under adapters/<key>, by the same downloader as the weights (resolve
the revision to a commit, verify every file's hash, report the outcome as its termination
message), in a Job of its own owned by the claim. When it is verified the commit is stamped on the
claim (one annotation per adapter); only then is the adapter loaded on the engines. Adding an
adapter therefore adds a Job and, minutes later, a runtime load: never a pod template change.

Without a cache (model.cache.mode None) the engine fetches a hub adapter itself by its id (the
pods reach the hub); an adapter in a claim is a path inside the model's own claim (mode PVC or
Cluster), mounted at /model-cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import cachestate
from shardwise.render import modelcache as mc

ANNOTATION_PREFIX = "lora.shardwise.io/"  # + key: the verified commit, on the base model's claim
RANK_SUFFIX = ".rank"  # + key + this: r of its adapter_config.json
JOB_LABEL = "shardwise.io/lora-cache"  # value: the adapter's key; on its Job and the Job's pods
SUBDIR = "adapters"
BASE_MISMATCH = "AdapterBaseMismatch"  # the downloader's reason: its shapes are another base model's


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    repo: str | None = None  # a hub repository
    revision: str = "main"
    path: str | None = None  # a folder inside the model's claim

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.repo}\0{self.revision}".encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Where:
    """An adapter's state before any engine sees it: `path` is what the engines load (None: not
    yet, or never, `reason` and `message` say which)."""

    path: str | None
    reason: str = ""
    message: str = ""
    commit: str | None = None
    download: Source | None = None  # the Job to create for it
    rank: int | None = None  # r of its adapter_config.json, as the downloader read it


def job_name(claim: str, source: Source) -> str:
    return f"{claim}-lora-{source.key}"


def folder(source: Source) -> str:
    return f"{SUBDIR}/{source.key}"


def locate(source: Source, ref: mc.CacheRef, *, cache_ready: bool, claim: Mapping[str, Any] | None,
           job: Mapping[str, Any] | None, job_pods: list[dict[str, Any]],
           progress: Mapping[str, Any] | None = None) -> Where:
    """Where the engines find `source`, given the base model's cache and the adapter's Job."""
    if source.path is not None:
        if ref.mode == "None":
            return Where(None, "AdapterNeedsClaim", f"adapter {source.name} is a path in a claim, but the model has no "
                                                    "cache claim (model.cache.mode None): use a hub source")
        return Where(f"{mc.CACHE_MOUNT}/{source.path.strip('/')}")
    if ref.mode == "None":
        return Where(source.repo)  # the engine downloads it itself
    if ref.mode == "PVC":
        return Where(None, "AdapterNeedsCache", f"adapter {source.name} is on the hub, but the model's claim "
                                                f"{ref.claim} is prefilled and the pods are offline: put the adapter in "
                                                "the claim and give its path")
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    commit = annotations.get(ANNOTATION_PREFIX + source.key)
    if commit:
        stamped = annotations.get(ANNOTATION_PREFIX + source.key + RANK_SUFFIX, "")
        return Where(f"{mc.CACHE_MOUNT}/{folder(source)}", commit=commit,
                     rank=int(stamped) if stamped.isdigit() else None)
    if not cache_ready or claim is None:
        return Where(None, "Downloading", f"adapter {source.name} waits for the model's cache")
    if job is None:
        return Where(None, "Downloading", f"downloading adapter {source.name} ({source.repo}@{source.revision})",
                     download=source)
    outcomes = [m for m in (cachestate.termination_message(p) for p in job_pods) if m]
    if cachestate.job_has(job, "Complete") or cachestate.job_has(job, "SuccessCriteriaMet"):
        done = next((m for m in outcomes if m.get("state") == "Complete" and m.get("verified")), None)
        if done is None:
            return Where(None, "AdapterDownloadFailed", f"the download of adapter {source.name} completed without "
                                                        "reporting verified files")
        found_rank = done.get("loraRank")
        return Where(f"{mc.CACHE_MOUNT}/{folder(source)}", commit=str(done.get("commit") or ""),
                     rank=found_rank if isinstance(found_rank, int) and found_rank > 0 else None)
    if cachestate.job_has(job, "Failed") or cachestate.job_has(job, "FailureTarget"):
        last = next((m for m in outcomes if m.get("state") == "Failed"), {})
        # The downloader's own reason where it is about the adapter itself, not the download.
        reason = BASE_MISMATCH if last.get("reason") == BASE_MISMATCH else "AdapterDownloadFailed"
        return Where(None, reason,
                     f"adapter {source.name} ({source.repo}@{source.revision}): "
                     f"{last.get('reason') or 'DownloadFailed'}: {last.get('message') or 'the downloader Job failed'}")
    if progress:  # the downloader's /progress, as the model's own download shows it
        return Where(None, "Downloading", f"adapter {source.name}: {cachestate.summary(dict(progress), long=True)}")
    return Where(None, "Downloading", f"downloading adapter {source.name} ({source.repo}@{source.revision})")


def build_job(source: Source, ref: mc.CacheRef, namespace: str, claim_uid: str, *, image: str,
              token_secret: tuple[str, str] | None) -> dict[str, Any]:
    """The model downloader, pointed at the adapter's repo and its folder in the model's claim."""
    job = mc.build_job(dataclasses.replace(ref, model=source.repo or "", revision=source.revision), namespace,
                       claim_uid, image=image, token_secret=token_secret)
    job["metadata"]["name"] = job_name(ref.claim or "", source)
    # The cache label with a value of its own: the model's cache reads its downloader's pods by
    # the model's key, and whatever runs downloader pods (a kubelet here, the local runner in
    # tests) finds these by the label's name.
    job_labels = {JOB_LABEL: source.key, mc.CACHE_LABEL: f"lora-{source.key}",
                  "app.kubernetes.io/component": "lora-cache", "app.kubernetes.io/managed-by": "shardwise"}
    job["metadata"]["labels"] = dict(job_labels)
    job["spec"]["template"]["metadata"]["labels"] = dict(job_labels)
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    args[args.index("--dest") + 1] = f"{mc.CACHE_MOUNT}/{folder(source)}"
    # The model's own files, in the same claim: the adapter is verified against its shapes.
    args += ["--lora-base", f"{mc.CACHE_MOUNT}/{mc.MODEL_SUBDIR}"]
    return job


def record(claim: Mapping[str, Any], source: Source, commit: str,
           rank: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(claim, metadata patch) stamping the verified commit (and rank), so later passes need no Job."""
    stamps = {ANNOTATION_PREFIX + source.key: commit or "unknown"}
    if rank is not None:
        stamps[ANNOTATION_PREFIX + source.key + RANK_SUFFIX] = str(rank)
    return ({**claim, "apiVersion": "v1", "kind": "PersistentVolumeClaim"}, {"annotations": stamps})


def sources(spec: InferenceDeploymentSpec) -> list[Source]:
    return [Source(a.name, repo=a.source.repo, revision=a.source.revision or "main", path=a.source.path)
            for a in spec.adapters]


def recorded(source: Source, claim: Mapping[str, Any] | None) -> str | None:
    """The verified commit stamped on the claim for `source` (None: not downloaded yet)."""
    return (((claim or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PREFIX + source.key)


def needs_job_reads(source: Source, ref: mc.CacheRef, claim: Mapping[str, Any] | None) -> bool:
    """Must the shell read this adapter's Job and pods? Only while its download is on its way."""
    return ref.mode == "Cluster" and source.repo is not None and claim is not None and not recorded(source, claim)


def ready_path(source: Source, ref: mc.CacheRef, claim: Mapping[str, Any] | None) -> str | None:
    """What the engines load for `source` now; None until its files are verified in the claim."""
    return locate(source, ref, cache_ready=False, claim=claim, job=None, job_pods=[]).path


@dataclasses.dataclass(frozen=True)
class CachePlan:
    where: dict[str, Where]  # adapter name -> its state before the engines
    jobs: tuple[dict[str, Any], ...] = ()  # downloads to create (never forced)
    records: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()  # (claim, annotations) once verified


def plan(wanted: list[Source], ref: mc.CacheRef, *, cache_ready: bool, claim: Mapping[str, Any] | None,
         jobs: Mapping[str, dict[str, Any] | None], job_pods: Mapping[str, list[dict[str, Any]]], namespace: str,
         image: str, token_secret: tuple[str, str] | None,
         progress: Mapping[str, Mapping[str, Any]] | None = None) -> CachePlan:
    """Each adapter's state, the Jobs to create and the commits to stamp, for one deployment.
    `jobs` and `job_pods` are keyed by Source.key (the shell reads them while needs_job_reads)."""
    where: dict[str, Where] = {}
    create: dict[str, dict[str, Any]] = {}
    records: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for source in wanted:
        found = locate(source, ref, cache_ready=cache_ready, claim=claim, job=jobs.get(source.key),
                       job_pods=list(job_pods.get(source.key) or ()), progress=(progress or {}).get(source.key))
        if found.download is not None and claim is not None and source.key not in create:
            uid = claim["metadata"].get("uid") or ""
            create[source.key] = build_job(source, ref, namespace, uid, image=image, token_secret=token_secret)
        if found.path is not None and found.commit is not None and not recorded(source, claim) and claim is not None:
            records.append(record(claim, source, found.commit, found.rank))
        where[source.name] = found
    return CachePlan(where, jobs=tuple(create.values()), records=tuple(records))


def with_known_ranks(spec: InferenceDeploymentSpec, where: Mapping[str, Where]) -> InferenceDeploymentSpec:
    """The spec with each adapter's rank as its downloaded adapter_config.json says, where the
    spec gives none: what sizes --max-lora-rank (api/lora.py) and the planner's LoRA memory."""
    if not any(a.rank is None and (w := where.get(a.name)) is not None and w.rank for a in spec.adapters):
        return spec
    return spec.model_copy(update={"adapters": [
        a if a.rank is not None or not (where.get(a.name) and where[a.name].rank)
        else a.model_copy(update={"rank": where[a.name].rank}) for a in spec.adapters]})
