"""API failures become typed errors: permanent ones go on the status, temporary ones back off."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException
from shardwise.controller import errors


def api_error(status: int, message: str = "", headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="reason")
    exc.body = json.dumps({"kind": "Status", "message": message}) if message else None
    exc.headers = headers or {}
    return exc


@pytest.mark.parametrize("status,message,reason,permanent", [
    (422, 'Service "9x" is invalid: metadata.name: Invalid value', "ChildRejected", True),
    (400, "bad request", "ChildRejected", True),
    (403, 'pods "x" is forbidden: exceeded quota: zero, requested: pods=1', "QuotaExceeded", True),
    (403, 'deployments.apps "x" is forbidden: User cannot patch', "Forbidden", True),
    (403, 'services "x" is forbidden: unable to create new content in namespace t because it is being terminated',
     "NamespaceTerminating", False),
    (409, "the object has been modified", "Conflict", False),
    (429, "too many requests", "TooManyRequests", False),
    (500, "etcd leader changed", "Unavailable", False),
    (503, "", "Unavailable", False),
])
def test_api_errors_are_typed_with_the_servers_message(status, message, reason, permanent) -> None:
    typed = errors.classify(api_error(status, message))
    assert (typed.reason, typed.permanent) == (reason, permanent)
    assert isinstance(typed, errors.PermanentError if permanent else errors.TemporaryError)
    assert typed.message == (message or "reason")


def test_retry_after_is_honoured() -> None:
    assert errors.classify(api_error(429, "slow down", {"Retry-After": "7"})).retry_after == 7.0
    assert errors.classify(api_error(429, "slow down", {"Retry-After": "soon"})).retry_after is None


def test_anything_else_is_temporary() -> None:
    typed = errors.classify(ConnectionResetError("peer reset"))
    assert not typed.permanent and typed.reason == "Unavailable" and "peer reset" in typed.message


def test_a_typed_error_passes_through() -> None:
    original = errors.PermanentError("ChildConflict", "Service/x is not ours")
    assert errors.classify(original) is original


def test_a_terminating_namespace_is_recognised_and_nothing_else_is() -> None:
    terminating = 'services "x" is forbidden: unable to create new content in namespace t because it is being terminated'
    assert errors.is_namespace_terminating(api_error(403, terminating))
    assert not errors.is_namespace_terminating(api_error(403, "exceeded quota: zero"))
    assert not errors.is_namespace_terminating(ConnectionResetError("peer reset"))
