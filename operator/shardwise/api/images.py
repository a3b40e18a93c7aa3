"""What an image field (spec.serving.image) may be: a container image reference.

The grammar is docker/distribution's reference regexp as the kubelet's runtimes read a name
(`ParseNormalizedNamed`): an optional registry (a host with a dot, `localhost`, or any host with
a port), lowercase path components joined by '.', '_', '__' or dashes, an optional `:tag` of at
most 128 characters, an optional `@sha256:` digest. Without it a trailing space was admitted and
the workload failed (ReplicaFailure) instead of the apply.
"""

from __future__ import annotations

from shardwise.api import checks

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
# The first component is a registry only when it has a dot or a port, or is localhost (else
# `library/ubuntu` would read as host `library`): the normalized reading every runtime uses.
_DOMAIN = (rf"(?:(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+|localhost|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
           rf"|{_DOMAIN_COMPONENT}:[0-9]+)")
NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST = r"sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}"
REFERENCE = rf"{NAME}(?::{TAG})?(?:@(?:{DIGEST}))?"
EXAMPLE = "vllm/vllm-openai:v0.32.0"


def checks_for(field: str) -> tuple[checks.Check, ...]:
    """The checks of one image field, with messages that name it."""
    return (
        checks.Check(
            bad=checks.WHITESPACE,
            message=f"{field} must not contain whitespace (a trailing space included): no runtime can pull it; "
                    f"remove it, e.g. {EXAMPLE}",
        ),
        checks.Check(
            bad="://",
            message=f"{field} is an image reference, not a URL: drop the scheme (registry/name:tag, e.g. {EXAMPLE})",
        ),
        checks.Check(
            good=REFERENCE,
            message=f"{field} must be an image reference [registry[:port]/]name[:tag][@sha256:digest]: lowercase "
                    "name components of letters, digits, '.', '_' and '-' joined by '/', a tag of up to 128 "
                    "letters, digits, '_', '.' or '-' not starting with '.' or '-', a digest of 64 hex digits; "
                    f"e.g. {EXAMPLE}",
        ),
    )


SERVING_IMAGE = checks_for("serving.image")


def problem(reference: str, field: str = "serving.image") -> str | None:
    """Why `reference` cannot be the image field `field`, or None."""
    return checks.first_problem(checks_for(field), reference)
