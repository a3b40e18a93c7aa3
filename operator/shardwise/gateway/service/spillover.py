"""Spill-over in the gateway process: a request for a self-hosted model with no replica Ready goes
to the provider model its InferenceDeployment names (spec.spillover), within its maxShare
(decide/spillover.py), instead of being held; the wake signal is still written, and the first
Ready replica ends the spell (requests after it are the engines', as before). The request itself
is then routed like a hosted model's (service/providers.Book.serve): the provider's key, its
cluster, its prices; it is never moved once routed, so a stream that has begun stays where it is.
"""

from __future__ import annotations

import logging
from typing import Any

import prometheus_client as prom

from shardwise.gateway import metrics
from shardwise.gateway.decide import providers, spillover
from shardwise.gateway.service.dispatcher import Dispatcher

log = logging.getLogger(__name__)

SPILLED = prom.Counter("shardwise_gateway_spilled_requests", "Requests for a self-hosted model answered through "
                       "its spill-over provider while it woke (model: the self-hosted name; provider: NS/NAME)",
                       ["model", "provider"], registry=metrics.REGISTRY)


class Spill:
    def __init__(self, dispatcher: Dispatcher, book: Any) -> None:
        self.dispatcher, self.book = dispatcher, book
        self.spells: dict[str, spillover.Spell] = {}
        self._missing: set[tuple[str, str, str]] = set()

    def target(self, model: str) -> providers.HostedModel | None:
        """The provider model to answer this request with, or None: the engines' (or held)."""
        route = self.dispatcher.table.get(model)
        if route is None or route.spillover is None:
            return None
        if route.endpoints or not route.waking:  # Ready (or not coming): the spell, if any, is over
            self.spells.pop(model, None)
            return None
        target = route.spillover
        hosted = self.book.get(target.model)
        if hosted is None or hosted.provider != target.provider:
            miss = (model, target.provider, target.model)
            if miss not in self._missing:  # once per deployment and target, not per request
                self._missing.add(miss)
                log.warning("spill-over of %s/%s: Provider %s offers no usable model %r; its requests are held",
                            route.namespace, route.name, target.provider, target.model)
            return None
        if not spillover.admit(self.spells.setdefault(model, spillover.Spell()), target.max_share):
            return None
        self.dispatcher.wake(route)
        SPILLED.labels(model, target.provider).inc()
        return hosted
