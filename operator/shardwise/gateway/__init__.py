"""The front door: one OpenAI endpoint for every InferenceDeployment.

Envoy is the data path and streams the bytes; this package decides. Four rooms, each importing only
the rooms below it (.importlinter enforces it):
- `service/`: the process and its I/O. Informers in, the ext_proc and access-log gRPC services,
  engine scrapes, the Redis quota store, the APIKey status writer, the HTTP port.
- `console/`: the live page (`page`, pure HTML from plain data) and its HTTP shell (`web`).
- `dataplane/`: Envoy's configuration and protocols: the bootstrap, the two Lua filters, the
  fast path's routes and endpoints and the ADS server that sends them.
- `decide/`: pure decisions over plain data, no I/O: the model table, the picker, holding while a
  model wakes, overload, keys, quota arithmetic, usage from responses, refusals in OpenAI's words.
`metrics` (the gateway's Prometheus series) sits below the shells that count into it.
"""
