"""A real, local Kubernetes control plane with simulated GPU nodes, for tests and `make demo`.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as ordinary processes
on loopback with free ports (see shared design CONTROL-PLANE.md). Nothing here is used by the
operator in production.
"""
