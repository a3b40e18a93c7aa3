"""The front door: one OpenAI endpoint for every InferenceDeployment.

Envoy is the data path and streams the bytes; this package decides. `extproc` answers Envoy's
ext_proc filter (pick an endpoint, hold a request while its model wakes, or refuse it in OpenAI's
words); `observer` reads the responses for metrics without delaying them. The decisions are pure
(`routes`, `picker`, `holding`, `openai_errors`, `envoy`); `server` is the shell that feeds them
from the informers and serves the gRPC, metrics and health ports.
"""
