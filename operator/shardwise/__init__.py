"""shardwise: a Kubernetes operator that serves LLMs with vLLM on GPUs, planning TP/PP from topology."""
