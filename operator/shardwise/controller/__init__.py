"""The operator's shell: gathers inputs from the caches, calls the pure decisions, applies them.

Built on the machinery in shardwise.kube (informers, work queue, Lease, events, probes); every
decision is in shardwise.decide and below. docs/architecture.md draws the layers.
"""

from shardwise.api import v1alpha1 as _api
from shardwise.kube import client as _client
from shardwise.observe import operator_metrics as _operator_metrics

_client.register_kind(f"{_api.GROUP}/{_api.VERSION}", _api.KIND, _api.PLURAL)
_operator_metrics.REGISTRY.register(_client.API_REQUESTS)
