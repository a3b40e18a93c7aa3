"""Children of an InferenceDeployment as plain data: pure functions of (resource, plan).

Nothing here talks to Kubernetes; the controller applies what these functions return.
"""

from shardwise.render.children import render

__all__ = ["render"]
