"""The tests' and benchmarks' view of the operator's /metrics: one key per sample, as exposed."""

import prometheus_client

from shardwise.devcluster.processes import free_port
from shardwise.devcluster.scrape import operator_metrics


def test_samples_are_keyed_as_the_exposition_writes_them() -> None:
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("demo_requests", "r", ["verb"], registry=registry).labels("GET").inc(3)
    prometheus_client.Gauge("demo_depth", "d", registry=registry).set(2)
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        got = operator_metrics(port)
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert got['demo_requests_total{verb="GET"}'] == 3.0 and got["demo_depth"] == 2.0
    assert operator_metrics(free_port()) == {}  # nothing answers: no figures, no exception
