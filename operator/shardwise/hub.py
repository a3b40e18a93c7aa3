"""Reading a model's config.json and safetensors metadata: from the Hugging Face hub or a folder.

The I/O half of planning a model the catalog lacks (shardwise.planner.hfconfig is the pure half).
It sits outside the planner because the planner is the pure core (no HTTP library), and outside
controller/ so that `shardwise plan` and the operator share it; .importlinter's layers leave a
top-level module free to serve both. It imports nothing of shardwise, so `planner.cli -> hub`
makes no package cycle; its classes fit hfconfig.RepoFiles by shape.

Usage (the operator passes the deployment's revision, token and endpoint):

    files = hub.HubFiles("Qwen/Qwen3-32B", revision="main", token=None, endpoint=None)
    arch = hfconfig.resolve_architecture(spec["model"], files)   # may raise hub.HubError

The hub's refusals become HubError with a reason (as the model cache's downloader names them) and
the hub's own words, so a condition can say exactly why a repo could not be read.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

CONFIG_FILE = "config.json"  # CONFIG_FILE; not imported, to keep hub -> planner out


class HubError(Exception):
    """A repository could not be read; `reason` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _hub_words(error: BaseException) -> str:
    """The hub's answer: its X-Error-Message header when it sent one, else the error's text."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or {}
    said = headers.get("X-Error-Message") if hasattr(headers, "get") else None
    if said:
        return str(said)
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _classify(error: BaseException, repo: str, revision: str) -> HubError:
    from huggingface_hub import errors

    words = _hub_words(error)
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, errors.GatedRepoError):
        if status == 403:
            return HubError("GatedModelAccessDenied", f"{repo} is gated and the token has no "
                            f"access (HTTP 403): {words}")
        return HubError("GatedModelNeedsToken", f"{repo} is gated and no token was given "
                        f"(HTTP {status or 401}): {words}")
    if isinstance(error, errors.RevisionNotFoundError):
        return HubError("RevisionNotFound", f"{repo} has no revision {revision!r}: {words}")
    if isinstance(error, errors.RepositoryNotFoundError):
        return HubError("ModelNotFound", f"{repo} does not exist on the hub, or is private and "
                        f"the token cannot see it (HTTP {status or 404}): {words}")
    if isinstance(error, errors.HfHubHTTPError):
        return HubError("HubError", f"the hub refused {repo} (HTTP {status}): {words}")
    return HubError("HubUnreachable", f"cannot reach the hub for {repo}: {words}")


class HubFiles:
    """A repository at a revision on the hub (or a hub-compatible endpoint), via huggingface_hub.

    `endpoint` None means HF_ENDPOINT or huggingface.co, as huggingface_hub decides; `cache_dir`
    None means its usual cache. Files are downloaded once per revision by huggingface_hub's cache."""

    def __init__(self, repo: str, *, revision: str | None = None, token: str | None = None,
                 endpoint: str | None = None, cache_dir: str | None = None) -> None:
        self.repo = repo
        self.revision = revision or "main"
        self.token = token
        self.endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self.cache_dir = cache_dir
        self.where = f"{repo}@{self.revision} (hub {self.endpoint or 'https://huggingface.co'})"

    def read_json(self, filename: str) -> Mapping[str, Any] | None:
        from huggingface_hub import errors, hf_hub_download

        try:
            path = hf_hub_download(self.repo, filename, revision=self.revision, token=self.token,
                                   endpoint=self.endpoint, cache_dir=self.cache_dir)
        except errors.EntryNotFoundError:
            return None  # the repo is readable; it just has no such file
        except Exception as error:  # every other failure is the hub's answer, classified
            raise _classify(error, self.repo, self.revision) from error
        return _parse(pathlib.Path(path), f"{self.where} {filename}")

    def safetensors_parameters(self) -> Mapping[str, int] | None:
        from huggingface_hub import HfApi

        try:
            info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
                self.repo, revision=self.revision
            )
        except Exception as error:
            raise _classify(error, self.repo, self.revision) from error
        safetensors = getattr(info, "safetensors", None)
        parameters = getattr(safetensors, "parameters", None)
        return dict(parameters) if parameters else None


class FolderFiles:
    """A model's files in a local folder (a pre-filled cache, `shardwise plan --model-config`); a
    path to a config.json names its folder."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        folder = pathlib.Path(path)
        self.folder = folder.parent if folder.is_file() else folder
        self.config = folder if folder.is_file() else folder / CONFIG_FILE
        self.where = f"folder {self.folder}"

    def read_json(self, filename: str) -> Mapping[str, Any] | None:
        path = self.config if filename == CONFIG_FILE else self.folder / filename
        if not path.is_file():
            return None
        return _parse(path, str(path))

    def safetensors_parameters(self) -> Mapping[str, int] | None:
        return None  # a folder has no hub metadata; the index's total_size serves instead


def _parse(path: pathlib.Path, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise HubError("ConfigUnreadable", f"{what} is not readable JSON: {error}") from error
    if not isinstance(data, Mapping):
        raise HubError("ConfigUnreadable", f"{what} is not a JSON object")
    return data
