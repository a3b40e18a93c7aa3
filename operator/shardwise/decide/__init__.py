"""Pure decisions about an InferenceDeployment: plain data in, plain data out, no I/O.

`reconcile.decide(snapshot)` is one reconcile's whole decision: from what the shell gathered
(the resource, its children and pods, nodes and others' GPU pods, the model cache's state,
pricing and learned corrections) to the objects to apply or delete, the status and the events.
The modules it builds on: planning (when to re-plan), progress (status from the workload),
workload_health (why pods fail), cachestate (the model cache), ownership (what we may touch),
transitions (which events), triggers (which watch events matter), live_status and
scaling_status (the observer's and the autoscaler's status). An import-linter contract forbids
Kubernetes clients and HTTP libraries here.
"""
