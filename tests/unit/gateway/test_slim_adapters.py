"""What the gateway's informers keep of pods and InferenceDeployments is enough to route adapters."""

from __future__ import annotations

from shardwise.gateway.decide import routes
from shardwise.gateway.service import server


def test_the_slimmed_stores_route_an_adapter_as_the_full_objects_do() -> None:
    infd = {"metadata": {"name": "m", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "managedFields": [{"big": "x"}]},
            "spec": {"model": {"name": "org/m"}, "adapters": [{"name": "sql", "source": {"repo": "org/sql"}},
                                                             {"name": "big", "source": {"repo": "org/big"}}]},
            "status": {"desiredReplicas": 2, "adapters": [
                {"name": "sql", "loadedReplicas": 1, "replicas": 2, "reason": "Loading", "message": "1 of 2"},
                {"name": "big", "loadedReplicas": 0, "replicas": 2, "reason": "RankAboveLimit", "message": "too big"}]}}
    pods = [{"metadata": {"name": f"m-{i}", "namespace": "a", "labels": {routes.INSTANCE_LABEL: "m"},
                          "annotations": {routes.LOADED_ADAPTERS_ANNOTATION: "sql"} if i == 1 else {"other": "x"}},
             "status": {"podIP": f"10.0.0.{i}", "conditions": [{"type": "Ready", "status": "True"}]}}
            for i in (1, 2)]
    full = routes.build_table([infd], pods)
    slim = routes.build_table([server.slim_infd(infd)], [server.slim_pod(p) for p in pods])
    assert slim == full
    assert slim.get("sql").endpoints == ("10.0.0.1:8000",) and slim.get("big").unavailable == "too big"
    assert "other" not in str(server.slim_pod(pods[1]))
