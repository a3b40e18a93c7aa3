"""A vLLM-compatible simulated engine, its fleet manager and a load generator.

GPU-less clusters (the local control plane with KWOK nodes) still need something that answers
like vLLM 0.32 on each serving pod's IP: the operator scrapes its `/metrics`, users and tests send
OpenAI requests to it. The engine's latency comes from a small queueing model around base latencies
measured on real engines (`measured`, scaled per GPU and model size; never the planner's
predictions), so latency rises with load and falls when the load spreads over more replicas.

Modules: `config` (what one engine is), `measured` (base latencies from measured figures),
`latency` (pure latency model), `protocol` and `errors`
(pure OpenAI/vLLM bodies), `lora` (pure adapter registry and its answers), `adapterfiles` (what an
adapter path holds), `metrics` (vLLM's Prometheus families), `engine` (admission, timing,
accounting), `app` (HTTP), `pods` (pure pod -> engine mapping), `fleet` (pod watch shell),
`load` (load generator), `targets` (load targets that follow a deployment's pods), `loopback`
(the guard that keeps all traffic on 127.0.0.0/8), `server` (CLI).
"""
