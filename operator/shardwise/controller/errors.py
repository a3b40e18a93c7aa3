"""Reconcile failures as types: permanent ones need a person, temporary ones a retry with backoff.

A permanent failure (the API server refused what we sent: 400/422 invalid, 403 forbidden or over
quota, or a child name taken by an object we do not control) will fail the same way until someone
changes the spec or the cluster; it goes on the status with its reason and is not hot-retried. A
temporary one (429, 5xx, 409 write races, timeouts, a dropped connection) is retried with backoff,
honouring the server's Retry-After. The work queue reads only `retry_after`/`permanent`.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiException

from shardwise.decide.workload_health import is_quota_refusal


NAMESPACE_TERMINATING = "NamespaceTerminating"


class ReconcileError(Exception):
    permanent = False

    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class PermanentError(ReconcileError):
    """Retrying without a change to the spec or the cluster cannot help; report it on the status."""

    permanent = True


class TemporaryError(ReconcileError):
    """Retry with backoff; `retry_after` (seconds) is the server's own hint when it gave one."""


def server_message(exc: ApiException) -> str:
    """The API server's own sentence (metav1.Status.message), else the HTTP reason."""
    try:
        body: Any = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def classify(exc: BaseException) -> ReconcileError:
    """The typed form of any exception a reconcile can raise."""
    if isinstance(exc, ReconcileError):
        return exc
    if not isinstance(exc, ApiException) or exc.status is None:
        return TemporaryError("Unavailable", str(exc) or type(exc).__name__)
    message = server_message(exc)
    if exc.status in (400, 422):
        return PermanentError("ChildRejected", message)
    if exc.status == 403 and "because it is being terminated" in message:
        # The resource goes with its namespace: nothing to report and nothing to retry (the
        # deletion events end it). See `is_namespace_terminating`.
        return TemporaryError(NAMESPACE_TERMINATING, message)
    if exc.status == 403:
        return PermanentError("QuotaExceeded" if is_quota_refusal(message) else "Forbidden", message)
    if exc.status == 429:
        return TemporaryError("TooManyRequests", message, retry_after=_retry_after(exc))
    if exc.status == 409:
        return TemporaryError("Conflict", message)
    return TemporaryError("Unavailable", message, retry_after=_retry_after(exc))


def is_namespace_terminating(exc: BaseException) -> bool:
    """A write refused because its namespace is being deleted: drop the key, do not retry."""
    try:
        return classify(exc).reason == NAMESPACE_TERMINATING
    except Exception:  # noqa: BLE001 - a malformed exception is simply not this one
        return False
