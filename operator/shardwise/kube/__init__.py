"""Kubernetes machinery that knows nothing about language models: client-go's parts in Python.

- client: API access as plain dicts (server-side apply, conditional status patches, deletes with
  a uid precondition), request counting;
- informer: list (paginated) + watch into a store, relist pruning, synced flag;
- workqueue: one keyed queue, collapse, priorities, per-key backoff;
- leader: Lease election, a leader that cannot renew stops acting before it expires;
- events: Events built as data and posted from a thread of their own;
- health: /healthz and /readyz answered from memory;
- quietlog: one warning per outage, not one per retry;
- compare: "does the live object already hold what we would apply", and minimal merge patches.

Imports nothing else of shardwise (an import-linter contract keeps it so): the operator and the
gateway both build on it.
"""
