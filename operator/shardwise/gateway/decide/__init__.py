"""The gateway's pure decisions: plain data in, plain data out, no gRPC, HTTP, Redis or Kubernetes.

To change how a request is routed, held, charged or refused, the rule is here; the rooms above
only move bytes to and from it.
"""
