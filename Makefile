# shardwise: `make demo` and `make test` do every set-up step themselves on a fresh machine
# (Debian packages, the Python environment, the Go-built control plane in ~/.cache/shardwise).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: help deps venv control-plane real-engine gie crds test unit e2e bench bench-scale bench-gateway fuzz demo lint clean

help:
	@echo "make demo    local control plane + simulated GPU fleet + operator + live traffic"
	@echo "             (REAL_ENGINE=llama-8b: that example on the real vLLM CPU engine)"
	@echo "make test    unit and integration tests (real kube-apiserver, etcd, scheduler, KWOK)"
	@echo "make bench   planner, collector and autoscaler benchmarks"
	@echo "make fuzz    the long fuzz profile: 50,000+ hostile inputs through the pure core"
	@echo "make bench-scale  the operator with 100 and 500 deployments, and on 5,000 nodes / 50,000 pods"
	@echo "make bench-gateway  latency and CPU the gateway adds, beside Envoy alone, vllm-router, LiteLLM"
	@echo "             (BENCH_GATEWAY_ARGS='--requests 500 --concurrency 64' for a short run)"
	@echo "make crds    regenerate crds/ from the pydantic API models"

deps:
	@bash hack/install-deps.sh

$(STAMP): pyproject.toml | deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

venv: $(STAMP)

# What only bench-gateway needs (vllm-router, Envoy, uvloop), in the same environment.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[bench]'
	@touch $@

control-plane: deps
	@bash hack/build-control-plane.sh >/dev/null

# The real vLLM CPU engine and a tiny local model, cached in ~/.cache/shardwise (cold: ~6 minutes).
real-engine:
	@bash hack/install-vllm.sh >/dev/null

# The Gateway API Inference Extension's endpoint picker and body-based router (Go modules, cached in
# ~/.cache/shardwise/gie; cold: ~5 minutes), for tests/e2e/test_gie_gateway.py.
gie: deps
	@bash hack/build-gie.sh >/dev/null

crds: venv
	$(VENV)/bin/shardwise crds

unit: venv
	$(PY) -m pytest -q tests/unit

e2e: venv control-plane real-engine gie
	$(PY) -m pytest -q tests/e2e

test: venv control-plane real-engine gie
	$(PY) -m pytest -q tests/unit tests/e2e

lint: venv
	$(VENV)/bin/lint-imports

bench: venv
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; echo; done

# The fuzz suite's long profile (tests/unit/fuzz; `make test` runs its fast profile). Replay a
# failure with FUZZ_ARGS=--hypothesis-seed=N.
fuzz: venv
	SHARDWISE_FUZZ=long $(PY) -m pytest -q -p no:cacheprovider tests/unit/fuzz $(FUZZ_ARGS)

bench-scale: venv control-plane
	$(PY) bench/scale.py

# One run, the same simulated engines and load through each contender (bench/gateway.py). The
# LiteLLM proxy installs on first use into ~/.cache/shardwise (its pins are not the project's).
bench-gateway: $(BENCH_STAMP) control-plane
	$(PY) bench/gateway.py $(BENCH_GATEWAY_ARGS)

# `make demo REAL_ENGINE=llama-8b` serves that example with the real vLLM engine.
demo: venv control-plane
	$(PY) -m shardwise.devcluster.demo $(foreach n,$(REAL_ENGINE),--real-engine $(n))

clean:
	rm -rf $(VENV) .demo .pytest_cache .hypothesis
