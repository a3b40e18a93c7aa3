"""GPU-aware rollouts: which strategy a new version rolls out with, and how far it has got.

Every Deployment or LeaderWorkerSet shardwise renders used to surge one replica, so a rollout
needed one whole extra replica's GPUs first; on a full cluster the surge pod stayed Pending for
ever. Here, when the rendered pod template changes, the strategy is chosen once from the same GPU
accounting the planner uses and written onto the workload itself, so it holds for the whole
rollout (also across operator restarts):

- `room`: free GPUs on the nodes this deployment may use, and how many more replicas fit;
- `strategy`: Surge when one more replica fits, else replace in place one replica (or group) at a
  time, or for a single replica with `spec.rollout.whenNoRoom: Wait`, wait for room;
- `workload`: the revision of a rendered template, and the decision as workload annotations;
- `pods`: why a pod of the new version cannot start (image pull, crash);
- `progress`: status.rollout and the RollingOut / RolloutBlocked / RolloutFailed conditions.

Pure: plain data in and out; the controller gathers nodes and pods and applies the result.
"""
