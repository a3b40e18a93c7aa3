# syntax=docker/dockerfile:1
# shardwise images. Base images are pinned by tag (tests/unit/chart/test_dockerfile.py refuses
# floating ones); the vLLM tag matches shardwise.api.v1alpha1.DEFAULT_IMAGE.
#
#   docker build --target operator -t shardwise/operator:0.1.0 .
#   docker build --target runtime  -t shardwise/runtime:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

# One wheel for both images: the distribution holds the operator and the runtime packages,
# and the extras decide which dependencies come along.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml ./
COPY operator/ operator/
COPY runtime/ runtime/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# The operator: the package's base dependencies only (the Kubernetes client, pydantic,
# prometheus-client, aiohttp), no NVML, no torch, no test tools.
FROM ${PYTHON_IMAGE} AS operator
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/shardwise-*.whl
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd; the chart runs
# it with the same uid, a read-only root filesystem and an emptyDir at /tmp.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["shardwise", "run"]

# What runs on GPU nodes: vLLM itself from the official image, plus the launcher (multi-node
# LeaderWorkerSet pods), the topology labeler (NVML), the model cache downloader (huggingface_hub
# is in the vLLM image already) and the simulated engine. vLLM's own
# entrypoint stays: rendered pods always name their command.
FROM ${VLLM_IMAGE} AS runtime
# The constraints keep every package vLLM was built with at its version: a shardwise
# dependency that would move one fails the build instead of breaking vLLM at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    uv pip freeze --system > /tmp/vllm-constraints.txt && \
    uv pip install --system --no-cache --constraint /tmp/vllm-constraints.txt \
        "shardwise[runtime] @ file://$(ls /wheels/shardwise-*.whl)" && \
    rm /tmp/vllm-constraints.txt
# Fail the build, not the first pod, if a console script is missing.
RUN shardwise-launch --help > /dev/null && \
    shardwise-labeler --help > /dev/null && \
    shardwise-sim --help > /dev/null && \
    shardwise-download --help > /dev/null
