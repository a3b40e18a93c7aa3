"""The operator's shell: gathers inputs from the caches, calls the pure decisions, applies them.

Built on the machinery in shardwise.kube (informers, work queue, Lease, events, probes); every
decision is in shardwise.decide and below. docs/architecture.md draws the layers.
"""

from shardwise.api import v1alpha1 as _api
from shardwise.kube import client as _client
from shardwise.observe import operator_metrics as _operator_metrics
from shardwise.render import routing as _routing

_client.register_kind(f"{_api.GROUP}/{_api.VERSION}", _api.KIND, _api.PLURAL)
# spec.routing's children: add-on kinds (Gateway API Inference Extension, Gateway API).
_client.register_kind(_routing.POOL_API_VERSION, _routing.POOL_KIND, _routing.POOL_PLURAL)
_client.register_kind(_routing.ROUTE_API_VERSION, _routing.ROUTE_KIND, _routing.ROUTE_PLURAL)
_operator_metrics.REGISTRY.register(_client.API_REQUESTS)
