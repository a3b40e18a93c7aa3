"""A local stand-in for the Hugging Face hub that the real `huggingface_hub` client talks to.

No internet here, so tests and the demo serve models from a folder: `<root>/<org>/<name>/...`
is the repository `org/name` at one commit (a hash of its file hashes). It answers the calls the
client makes for `model_info` and `hf_hub_download`:

  GET  /api/models/{repo}[/revision/{rev}]      model info with siblings (size, blobId, lfs sha256)
  GET  /api/models/{repo}/tree/{rev}            the file tree (`list_repo_tree`, snapshot_download)
  HEAD /{repo}/resolve/{rev}/{path}             X-Repo-Commit, ETag/X-Linked-Etag, Content-Length
  GET  /{repo}/resolve/{rev}/{path}             the bytes, honouring `Range` (how a download resumes)

and the hub's error shapes (status plus `X-Error-Code`): RepoNotFound, RevisionNotFound,
EntryNotFound, GatedRepo (401 without a token, 403 with a wrong one). A repository is gated when
its folder holds `.hub.json` with {"gated": true, "token": "..."}; a `safetensors` object there
({"parameters": {"BF16": n}, "total": n}, as the hub publishes it) is served in the model info, so
the planner can read a model's parameter count from it (tests/fixtures/hub-configs). Downloads can be throttled
(bytes per second per response) so progress is visible, and every byte served is counted per
file, so a test can prove that a resumed download did not fetch finished files again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pathlib
import re
from collections import Counter
from typing import Any

from aiohttp import web

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
CHUNK = 64 * 1024
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclasses.dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    blob_id: str  # git blob sha1, as the hub reports for every file
    sha256: str | None  # LFS files only

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


@dataclasses.dataclass(frozen=True)
class HubRepo:
    repo_id: str
    folder: pathlib.Path
    files: tuple[HubFile, ...]
    commit: str
    gated_token: str | None
    safetensors: dict[str, Any] | None = None


def _hash_file(path: pathlib.Path, lfs: bool) -> tuple[str, str | None]:
    size = path.stat().st_size
    blob = hashlib.sha1(f"blob {size}\0".encode())
    sha256 = hashlib.sha256() if lfs else None
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            blob.update(chunk)
            if sha256 is not None:
                sha256.update(chunk)
    return blob.hexdigest(), sha256.hexdigest() if sha256 else None


def load_repo(root: pathlib.Path, repo_id: str) -> HubRepo | None:
    folder = root / repo_id
    if "/" not in repo_id or ".." in repo_id.split("/") or not folder.is_dir():
        return None
    files = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".hub.json"):
        relative = path.relative_to(folder).as_posix()
        blob_id, sha256 = _hash_file(path, relative.endswith(LFS_SUFFIXES))
        files.append(HubFile(relative, path.stat().st_size, blob_id, sha256))
    commit = hashlib.sha1("".join(f"{f.path}\0{f.blob_id}\n" for f in files).encode()).hexdigest()
    settings = json.loads((folder / ".hub.json").read_text()) if (folder / ".hub.json").is_file() else {}
    token = settings.get("token") if settings.get("gated") else None
    safetensors = settings.get("safetensors") if isinstance(settings.get("safetensors"), dict) else None
    return HubRepo(repo_id, folder, tuple(files), commit, token, safetensors)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status,
                             headers={"X-Error-Code": code, "X-Error-Message": message})


class LocalHub:
    """The aiohttp application plus what it counted; `throttle_bps` 0 means unthrottled."""

    def __init__(self, root: pathlib.Path, *, throttle_bps: int = 0) -> None:
        self.root = pathlib.Path(root)
        self.throttle_bps = throttle_bps
        self.bytes_served: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/models/{org}/{name}", self._info)
        app.router.add_get("/api/models/{org}/{name}/revision/{rev}", self._info)
        app.router.add_get("/api/models/{org}/{name}/tree/{rev}", self._tree)
        app.router.add_get("/{org}/{name}/resolve/{rev}/{path:.+}", self._resolve)
        return app

    def served(self, repo_id: str) -> int:
        return sum(n for (repo, _), n in self.bytes_served.items() if repo == repo_id)

    # -- handlers ---------------------------------------------------------------------------
    def _repo(self, request: web.Request) -> HubRepo | web.Response:
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        repo = load_repo(self.root, repo_id)
        if repo is None:
            return _error(404, "RepoNotFound", f"Repository Not Found for url: {request.url}.")
        if repo.gated_token is not None:
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer "):
                return _error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                                "to it and be authenticated to access it. Please log in.")
            if header.removeprefix("Bearer ") != repo.gated_token:
                return _error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                                                "authorized list.")
        rev = request.match_info.get("rev", "main")
        if rev not in ("main", repo.commit):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return repo

    async def _info(self, request: web.Request) -> web.StreamResponse:
        self.requests["info"] += 1
        repo = self._repo(request)
        if isinstance(repo, web.Response):
            return repo
        siblings: list[dict[str, Any]] = []
        for f in repo.files:
            sibling: dict[str, Any] = {"rfilename": f.path, "size": f.size, "blobId": f.blob_id}
            if f.sha256:
                sibling["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(sibling)
        extra = {"safetensors": repo.safetensors} if repo.safetensors else {}
        return web.json_response({
            **extra,
            "_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0],
            "sha": repo.commit, "private": False, "disabled": False,
            "gated": "manual" if repo.gated_token else False, "tags": [], "siblings": siblings,
            "usedStorage": sum(f.size for f in repo.files),
        })

    async def _tree(self, request: web.Request) -> web.StreamResponse:
        """The repository's files, as `list_repo_tree` reads them (snapshot_download lists the tree
        first, as vLLM does for a LoRA adapter given by hub id); one page, so no Link header."""
        self.requests["tree"] += 1
        repo = self._repo(request)
        if isinstance(repo, web.Response):
            return repo
        entries: list[dict[str, Any]] = []
        folders = sorted({"/".join(f.path.split("/")[:i]) for f in repo.files for i in range(1, f.path.count("/") + 1)})
        entries += [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                    for d in folders]
        for f in repo.files:
            entry: dict[str, Any] = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
            if f.sha256:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            entries.append(entry)
        return web.json_response(entries)

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        self.requests[request.method] += 1
        repo = self._repo(request)
        if isinstance(repo, web.Response):
            return repo
        path = request.match_info["path"]
        found = next((f for f in repo.files if f.path == path), None)
        if found is None:
            return _error(404, "EntryNotFound", f"{path} does not exist at revision {repo.commit}")
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{found.etag}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if found.sha256:
            headers.update({"X-Linked-Etag": f'"{found.sha256}"', "X-Linked-Size": str(found.size)})
        start, end = 0, found.size - 1
        status = 200
        match = _RANGE.match(request.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)) if match.group(2) else end, end)
            if start > end:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{found.size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{found.size}"
        headers["Content-Length"] = str(end - start + 1)
        if request.method == "HEAD":
            return web.Response(status=status, headers=headers)
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        with (repo.folder / path).open("rb") as handle:
            handle.seek(start)
            remaining = end - start + 1
            while remaining > 0:
                chunk = handle.read(min(CHUNK, remaining))
                if not chunk:
                    break
                await response.write(chunk)
                remaining -= len(chunk)
                self.bytes_served[(repo.repo_id, path)] += len(chunk)
                if self.throttle_bps:
                    await asyncio.sleep(len(chunk) / self.throttle_bps)
        await response.write_eof()
        return response


async def start(hub: LocalHub, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(hub.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
