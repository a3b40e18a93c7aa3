"""`shardwise-download`: the model cache downloader Job's entrypoint.

It resolves the requested revision to a commit with the real `huggingface_hub` client, downloads
every file of that commit into `--dest` in parallel (`hf_hub_download` into a local folder keeps
per-file metadata and `.incomplete` parts, so a killed pod's successor skips finished files and
resumes the partial ones with HTTP Range), then verifies each file's size and hash (LFS sha256,
else the git blob sha1 the hub reports) and writes a marker beside the files.

How the operator learns what happens, without this pod holding any Kubernetes credentials:
  - while it runs, `GET /progress` on `--port` answers JSON (bytes done/total, rate, time left),
    scraped by the operator over the pod IP exactly like the engines' /metrics;
  - when it ends, the outcome (commit, bytes, or a failure reason) is the container's
    termination message, which Kubernetes copies into the pod status for the operator to read.
Exit status: 0 complete and verified; 2 a failure retrying cannot fix (gated, not found, no
space: the Job's podFailurePolicy fails the Job at once); 1 anything else (the Job retries, and
the retry resumes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import errno
import hashlib
import http.server
import json
import logging
import os
import pathlib
import sys
import threading
import time
from typing import Any

from shardwise_runtime.download import lora_check
from shardwise_runtime.download.progress import Progress

log = logging.getLogger("shardwise-download")
MARKER = ".shardwise-cache.json"
CHUNK_BYTES = 1 << 20
PERMANENT = 2
RETRY = 1


class DownloadFailed(Exception):
    def __init__(self, reason: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.reason, self.message, self.exit_code = reason, message, exit_code


def classify(error: BaseException, repo: str, revision: str) -> DownloadFailed:
    """A precise reason for the operator's condition, and whether retrying can help."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    if isinstance(error, DownloadFailed):
        return error
    if isinstance(error, GatedRepoError):
        status = error.response.status_code if error.response is not None else 401
        if status == 401:
            return DownloadFailed("GatedModelNeedsToken", f"{repo} is gated and no token was given: put a Hugging "
                                  "Face token with access in a Secret and set spec.model.hfTokenSecretRef", PERMANENT)
        return DownloadFailed("GatedModelAccessDenied", f"{repo} is gated and the token in spec.model."
                              "hfTokenSecretRef has no access (HTTP 403): request access on the hub", PERMANENT)
    if isinstance(error, RevisionNotFoundError):
        return DownloadFailed("RevisionNotFound", f"{repo} has no revision {revision!r} (HTTP 404)", PERMANENT)
    if isinstance(error, RepositoryNotFoundError):
        return DownloadFailed("ModelNotFound", f"{repo} does not exist on the hub, or is private and the token "
                              "cannot see it (HTTP 404/401)", PERMANENT)
    if isinstance(error, HfHubHTTPError) and error.response is not None and error.response.status_code in (401, 403):
        code = error.response.status_code
        return DownloadFailed("HubUnauthorized" if code == 401 else "HubForbidden",
                              f"the hub refused {repo} (HTTP {code}): check the token", PERMANENT)
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return DownloadFailed("DiskFull", f"the cache volume is full while downloading {repo}: set a larger "
                              "spec.model.cache.size", PERMANENT)
    return DownloadFailed("DownloadError", f"{type(error).__name__}: {error}", RETRY)


def _hash_matches(path: pathlib.Path, size: int, sha256: str | None, blob_id: str | None) -> bool:
    if path.stat().st_size != size:
        return False
    if not sha256 and not blob_id:
        return True
    digest = hashlib.sha256() if sha256 else hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == (sha256 or blob_id)


PARTS = ".shardwise-parts"


def _part_path(dest: pathlib.Path, filename: str) -> pathlib.Path:
    return dest / PARTS / f"{filename}.part"


def _bytes_on_disk(dest: pathlib.Path, files: list[Any]) -> int:
    total = 0
    for f in files:
        final, part = dest / f.rfilename, _part_path(dest, f.rfilename)
        if final.is_file():
            total += final.stat().st_size
        elif part.is_file():
            total += part.stat().st_size
    return total


def _serve_progress(progress: Progress, host: str, port: int) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] not in ("/progress", "/"):
                self.send_error(404)
                return
            body = json.dumps(progress.as_dict()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="progress", daemon=True).start()
    return server


def _fetch(repo: str, commit: str, sibling: Any, dest: pathlib.Path, *, endpoint: str | None,
           token: str | None) -> None:
    """One file: skipped when finished, else appended to its part file from where that ends.

    The client's `http_get` sends `Range: bytes=<part size>-`, so a part left by a killed pod is
    continued, not fetched again (hf_hub_download's own part files are unique per process since
    huggingface_hub 1.x, so they do not survive a pod). Finished files are renamed into place.
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    final, part = dest / sibling.rfilename, _part_path(dest, sibling.rfilename)
    size = sibling.size
    if final.is_file() and (size is None or final.stat().st_size == size):
        return
    part.parent.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    resume = part.stat().st_size if part.is_file() else 0
    if size is not None and resume > size:  # not ours to trust: start over
        part.unlink()
        resume = 0
    if size is None or resume < size:
        url = hf_hub_url(repo, sibling.rfilename, revision=commit, endpoint=endpoint)
        headers = build_hf_headers(token=token or False)
        with part.open("ab") as handle:
            http_get(url, handle, resume_size=resume, headers=headers, expected_size=size,
                     displayed_filename=sibling.rfilename)
    os.replace(part, final)


def download(repo: str, revision: str, dest: pathlib.Path, *, endpoint: str | None, token: str | None,
             parallel: int, progress: Progress, chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """Fill `dest` with `repo` at `revision`, verified; returns the marker's content."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import RevisionNotFoundError

    # The client writes in chunks of this size (10 MiB by default): smaller chunks make progress
    # finer and lose less of a file in flight when the pod is killed.
    constants.DOWNLOAD_CHUNK_SIZE = chunk_bytes
    api = HfApi(endpoint=endpoint, token=token or False)
    # The first attempt pins the commit `revision` resolved to; a retry after a kill continues
    # that commit, never a newer upstream one, so the volume never mixes files of two commits.
    pin = dest / PARTS / "pinned.json"
    pinned = json.loads(pin.read_text()) if pin.is_file() else {}
    resolve = pinned["commit"] if pinned.get("repo") == repo and pinned.get("revision") == revision else revision
    try:
        info = api.model_info(repo, revision=resolve, files_metadata=True)
    except RevisionNotFoundError:
        if resolve == revision:
            raise
        raise DownloadFailed("PinnedCommitGone", f"{repo}: commit {resolve}, which {revision!r} resolved to when this "
                             "cache started, is gone from the hub; delete the cache claim to start over",
                             PERMANENT) from None
    pin.parent.mkdir(parents=True, exist_ok=True)
    pin.write_text(json.dumps({"repo": repo, "revision": revision, "commit": info.sha}))
    files = [s for s in info.siblings or [] if not s.rfilename.startswith(".")]
    commit = str(info.sha)
    progress.commit = commit
    progress.files_total = len(files)
    progress.bytes_total = sum(f.size or 0 for f in files)
    marker = dest / MARKER
    if marker.is_file():
        recorded = json.loads(marker.read_text())
        if recorded.get("commit") == commit and recorded.get("verified"):
            progress.files_done, progress.state = len(files), "Complete"
            progress.sample(time.monotonic(), progress.bytes_total)
            return dict(recorded)
    progress.state = "Downloading"
    dest.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            progress.sample(time.monotonic(), _bytes_on_disk(dest, files))

    watcher = threading.Thread(target=watch, name="progress-sampler", daemon=True)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
            futures = [pool.submit(_fetch, repo, commit, f, dest, endpoint=endpoint, token=token) for f in files]
            for future in concurrent.futures.as_completed(futures):
                future.result()  # the first failure ends the run; the next attempt resumes
                progress.files_done += 1
    finally:
        stop.set()
        watcher.join()
    progress.sample(time.monotonic(), _bytes_on_disk(dest, files))
    progress.state = "Verifying"
    for f in files:
        sha256 = f.lfs.sha256 if f.lfs else None
        path = dest / f.rfilename
        if not _hash_matches(path, f.size or 0, sha256, None if sha256 else f.blob_id):
            path.unlink(missing_ok=True)  # the retry downloads it again
            raise DownloadFailed("VerificationFailed", f"{f.rfilename}: size or hash differs from the hub's", RETRY)
    result = {"commit": commit, "repo": repo, "files": len(files), "bytes": progress.bytes_total, "verified": True}
    marker.write_text(json.dumps(result))
    progress.state = "Complete"
    return result


def _write_termination(path: str, payload: dict[str, Any]) -> None:
    try:
        pathlib.Path(path).write_text(json.dumps(payload)[:4000])  # Kubernetes keeps 4096 bytes
    except OSError as exc:
        log.warning("cannot write the termination message to %s: %s", path, exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardwise-download", description=__doc__.split("\n")[0])
    parser.add_argument("--repo", required=True, help="hub repository id, e.g. meta-llama/Llama-3.1-8B-Instruct")
    parser.add_argument("--revision", default="main", help="branch, tag or commit")
    parser.add_argument("--dest", required=True, type=pathlib.Path, help="folder on the cache volume")
    parser.add_argument("--parallel", type=int, default=8, help="files downloaded at once")
    parser.add_argument("--host", default=os.environ.get("SHARDWISE_PROGRESS_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=8001, help="progress endpoint port (0: none)")
    parser.add_argument("--endpoint", default=os.environ.get("HF_ENDPOINT"), help="hub URL (HF_ENDPOINT)")
    parser.add_argument("--lora-base", type=pathlib.Path, default=None,
                        help="a LoRA adapter: the base model's folder, to check the adapter's shapes against")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    termination = os.environ.get("SHARDWISE_TERMINATION_LOG", "/dev/termination-log")
    progress = Progress()
    server = _serve_progress(progress, args.host, args.port) if args.port else None
    try:
        result = download(args.repo, args.revision, args.dest, endpoint=args.endpoint,
                          token=os.environ.get("HF_TOKEN") or None, parallel=args.parallel, progress=progress)
        mismatch = lora_check.problem(args.dest, args.lora_base) if args.lora_base else None
        if mismatch:
            raise DownloadFailed("AdapterBaseMismatch", f"{args.repo} does not fit the base model: {mismatch}",
                                 PERMANENT)
        if args.lora_base:  # the rank sizes the engines' --max-lora-rank (operator/shardwise/api/lora.py)
            rank = lora_check.rank(args.dest)
            if rank is not None:
                result = {**result, "loraRank": rank}
    except BaseException as error:  # noqa: BLE001 - every failure becomes a reason for the operator
        failed = classify(error, args.repo, args.revision)
        progress.state, progress.reason, progress.message = "Failed", failed.reason, failed.message
        log.error("%s: %s", failed.reason, failed.message)
        _write_termination(termination, {"state": "Failed", "reason": failed.reason, "message": failed.message,
                                         "commit": progress.commit})
        return failed.exit_code
    finally:
        if server is not None:
            server.shutdown()
    log.info("complete: %s at %s, %d files, %d bytes, verified", args.repo, result["commit"], result["files"],
             result["bytes"])
    _write_termination(termination, {"state": "Complete", **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
