"""What spec.model.name may be: a Hugging Face repo id, or an absolute path inside the container.

The repo id grammar is the hub client's own (huggingface_hub `validate_repo_id`): `namespace/name`
(or a bare `name`, the hub's legacy form such as `gpt2`), each part 1 to 96 of `[A-Za-z0-9_.-]`
starting and ending with a letter, digit or `_`, no `--` or `..`, not ending in `.git`. The other
form is an absolute path to weights already in the image or on a volume (`/models/llama`), which
vLLM loads as it is (render.modelcache caches only `namespace/name` ids).

Without this, a name with a leading space, shell syntax or a full hub URL was planned and served
until vLLM or the hub client refused it inside the pod.
"""

from __future__ import annotations

import re

from shardwise.api import checks

# huggingface_hub REPO_ID_REGEX, one part: `\b[\w\-.]{1,96}\b` with `\w` ASCII.
REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = rf"(?:{REPO_PART}/)?{REPO_PART}"
# An absolute path of plain segments (the hub cache's own `models--org--name/snapshots/...` fits).
LOCAL_PATH = r"(?:/[A-Za-z0-9_.-]+)+/?"
EXAMPLE = "meta-llama/Llama-3.1-8B-Instruct"

_URL = r"^[A-Za-z][A-Za-z0-9+.-]*://"
# A hub URL whose path starts with namespace/name: split on '/', those are items 3 and 4.
_HUB_URL = r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/[^/]+/[^/]+"
URL_MESSAGE = (f"model.name must be a Hugging Face repo id (namespace/name, e.g. {EXAMPLE}) or an absolute "
               "path inside the container, not a URL")
_HUB_URL_MESSAGE = "model.name must be a Hugging Face repo id, not a URL: use the repo id "


def _describe_url(value: str) -> str:
    if re.search(_HUB_URL, value):
        parts = value.split("/")
        return f"{_HUB_URL_MESSAGE}{parts[3]}/{parts[4]}"
    return URL_MESSAGE


CHECKS = (
    checks.Check(
        bad=r"""[$`;|&<>(){}\\'"*?!]""",
        message="model.name holds shell syntax ($(...), backticks, quotes, ;, |, &): no shell reads it, vLLM "
                f"gets the text as it is; write the repo id itself, e.g. {EXAMPLE}",
    ),
    checks.Check(
        bad=checks.WHITESPACE,
        message=f"model.name must not contain whitespace (a leading or trailing space included): write the repo "
                f"id alone, e.g. {EXAMPLE}",
    ),
    checks.Check(
        bad=_URL, message=URL_MESSAGE, describe=_describe_url,
        # The same sentence as _describe_url, built by the API server.
        message_cel=f"self.matches({checks.cel_string(_HUB_URL)}) ? {checks.cel_string(_HUB_URL_MESSAGE)} + "
                    f"self.split('/')[3] + '/' + self.split('/')[4] : {checks.cel_string(URL_MESSAGE)}",
    ),
    checks.Check(
        good=f"{REPO_ID}|{LOCAL_PATH}",
        message=f"model.name must be a Hugging Face repo id, namespace/name (letters, digits, '-', '_' and '.'; "
                f"each part 1 to 96 characters starting and ending with a letter, digit or '_'), e.g. {EXAMPLE}, "
                "or an absolute path inside the container such as /models/llama",
    ),
    checks.Check(
        only_if=r"^[^/]", bad=r"--|\.\.",
        message="model.name may not contain '--' or '..': the hub refuses such repo ids (check the spelling "
                "on the model's hub page)",
    ),
    checks.Check(
        only_if=r"^[^/]", bad_whole=r".*\.git",
        message="model.name may not end in .git: give the repo id (namespace/name) without it",
    ),
)


def problem(name: str) -> str | None:
    """Why `name` cannot be spec.model.name (the CRD's CEL rules, in Python), or None."""
    return checks.first_problem(CHECKS, name)
