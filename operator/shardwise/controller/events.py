"""Events about an InferenceDeployment, handed to the process's event sink (never raising)."""

from __future__ import annotations

import logging
from typing import Any

from shardwise.api import v1alpha1 as api
from shardwise.kube import events
from shardwise.kube.client import ApiException, Kube

log = logging.getLogger(__name__)
REPORTER = "shardwise-operator"


def build_event(infd: dict[str, Any], *, type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    involved = {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": api.KIND, "metadata": infd["metadata"]}
    return events.build_event(involved, type_=type_, reason=reason, message=message, now=now, reporter=REPORTER)


def emit(kube: Kube, infd: dict[str, Any], *, type_: str, reason: str, message: str, now: str) -> None:
    try:
        kube.create_event(build_event(infd, type_=type_, reason=reason, message=message, now=now))
    except ApiException as exc:  # an event is informative; failing to post one must not fail a reconcile
        log.warning("could not post event %s: %s", reason, exc.reason)
