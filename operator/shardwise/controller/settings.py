"""Operator settings: explicit, passed in, never read from globals deep inside the code."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    namespace: str = "shardwise-system"  # where the operator runs and its pricing ConfigMap lives
    pricing_configmap: str = "shardwise-pricing"
    # Level-triggered safety net, read from the caches: watches trigger every real change, so this
    # only bounds how long a missed one could go unnoticed.
    resync_seconds: float = 300.0
    metrics_interval_seconds: float = 15.0
    metrics_window_seconds: float = 300.0
    scrape_timeout_seconds: float = 3.0
    # A status figure is rewritten when it moves by more than this fraction (or the window rolls).
    metrics_write_threshold: float = 0.05
    # How often the autoscaler looks for deployments whose evaluation period is due.
    autoscale_tick_seconds: float = 1.0
    # Image for multi-node pods whose spec keeps the default vLLM image: that image plus
    # shardwise-launch. None leaves spec.serving.image as it is.
    runtime_image: str | None = None
    # Images of the engines beyond vLLM (spec.engine sglang, trtllm) for specs that keep the default
    # serving.image: (engine, image) pairs; an engine not named here gets render/engine.py's default.
    engine_images: tuple[tuple[str, str], ...] = ()
    # Model weight cache (docs in docs/model-cache.md): the mode for specs that name none (the
    # chart sets Cluster; a bare `shardwise run` keeps the pre-cache behaviour, so harnesses and
    # tests that do not care see no cache), the storage class for specs that name none (None: the
    # cluster default), the hub URL the downloader uses, the downloader's image, and how long an
    # unused cache is kept (< 0: forever).
    model_cache_mode: str = "None"
    model_cache_storage_class: str | None = None
    hub_endpoint: str | None = None
    downloader_image: str = "shardwise/runtime:0.1.0"
    model_cache_grace_seconds: float = 3600.0
    model_cache_poll_seconds: float = 2.0
    # LoRA adapters: how often the leader compares each replica's served adapters with the spec,
    # and how long one engine call may take (a load reads the adapter's files).
    adapter_interval_seconds: float = 5.0
    adapter_timeout_seconds: float = 60.0
    metrics_port: int = 8080
    health_port: int = 8081

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        env = os.environ
        values: dict[str, object] = {}
        if "POD_NAMESPACE" in env:
            values["namespace"] = env["POD_NAMESPACE"]
        for field, var in (("resync_seconds", "SHARDWISE_RESYNC_SECONDS"),
                           ("metrics_interval_seconds", "SHARDWISE_METRICS_INTERVAL_SECONDS"),
                           ("metrics_window_seconds", "SHARDWISE_METRICS_WINDOW_SECONDS"),
                           ("scrape_timeout_seconds", "SHARDWISE_SCRAPE_TIMEOUT_SECONDS"),
                           ("autoscale_tick_seconds", "SHARDWISE_AUTOSCALE_TICK_SECONDS"),
                           ("model_cache_grace_seconds", "SHARDWISE_MODEL_CACHE_GRACE_SECONDS"),
                           ("model_cache_poll_seconds", "SHARDWISE_MODEL_CACHE_POLL_SECONDS"),
                           ("adapter_interval_seconds", "SHARDWISE_ADAPTER_INTERVAL_SECONDS")):
            if var in env:
                values[field] = float(env[var])
        if env.get("SHARDWISE_RUNTIME_IMAGE"):
            values["runtime_image"] = env["SHARDWISE_RUNTIME_IMAGE"]
            values["downloader_image"] = env["SHARDWISE_RUNTIME_IMAGE"]
        engine_images = tuple((engine, env[var]) for engine, var in (("sglang", "SHARDWISE_SGLANG_IMAGE"),
                                                                    ("trtllm", "SHARDWISE_TRTLLM_IMAGE")) if env.get(var))
        if engine_images:
            values["engine_images"] = engine_images
        for field, var in (("model_cache_mode", "SHARDWISE_MODEL_CACHE_MODE"),
                           ("model_cache_storage_class", "SHARDWISE_MODEL_CACHE_STORAGE_CLASS"),
                           ("hub_endpoint", "SHARDWISE_HUB_ENDPOINT"),
                           ("downloader_image", "SHARDWISE_DOWNLOADER_IMAGE")):
            if env.get(var):
                values[field] = env[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
