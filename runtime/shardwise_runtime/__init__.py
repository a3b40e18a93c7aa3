"""What runs on GPU nodes and in serving pods: the topology labeler, the launcher, the simulated engine."""
