"""Which engines the fast path spares new requests: those queueing far beyond their peers.

Envoy's ring hash bounds the requests *it* has open at each engine (fastpath.py); it cannot see
an engine's own queue, which also holds other gateway replicas' requests, other clients', and the
backlog of an engine slower than its peers (a busier node, longer prompts, a cache that preempts).
So on every scrape the service compares the engines that serve each model by the picker's
engine-side load, `waiting + KV_WEIGHT x KV-cache use` (picker.engine_load), and takes an engine
out of the model's subset in the fast cluster's endpoints (fastpath.py) when

- it has requests waiting, and its load is above LOAD_FACTOR x the mean of the model's engines + 1
  (the picker's bound, so the two paths agree on what "too loaded" means); it stays out while its
  load is above that mean, so a scrape every 2 s does not flip it back and forth (hysteresis).

Envoy then hashes the model's new requests over the other engines (the spared engine's arcs of the
ring go to its neighbours, the rest stay); requests already running stay where they are, and its
conversations come back once it is back to the mean. Not all of a model's engines can be above
their own mean, so no model loses every engine; an engine the service could not read is never
spared, as it weighs nothing extra for the picker. Why not Envoy's DEGRADED health status: its
ring hash builds the ring from healthy hosts only, so a model whose engines were all degraded got
Envoy's 503 "no healthy upstream" (tried on Envoy 1.40 with four engines of one model).

Pure: the table, the scraped stats and the previous answer in, the (model, endpoint) pairs out.
"""

from __future__ import annotations

from collections.abc import Mapping

from shardwise.gateway.decide import picker, routes


Spared = frozenset[tuple[str, str]]  # (model, IP:PORT): the engine is out of the model's subset


def spared(table: routes.Table, stats: Mapping[str, picker.EngineStats], previous: Spared = frozenset()) -> Spared:
    """The (model, endpoint) pairs to leave out of the fast path now; `previous`: those left out last time."""
    marked: set[tuple[str, str]] = set()
    for route in table.models():
        known = {e: picker.engine_load(stats[e]) for e in route.endpoints if e in stats}
        if len(known) < 2:
            continue  # one engine has no peer to send its requests to
        mean = sum(known.values()) / len(known)
        for endpoint, load in known.items():
            if (route.model, endpoint) in previous:
                if load > mean:
                    marked.add((route.model, endpoint))
            elif stats[endpoint].waiting >= 1 and load > picker.LOAD_FACTOR * mean + 1:
                marked.add((route.model, endpoint))
    return frozenset(marked)
