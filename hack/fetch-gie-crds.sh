#!/usr/bin/env bash
# Copies the Gateway API Inference Extension's InferencePool CRD and the Gateway API's standard
# CRDs (Gateway, GatewayClass, HTTPRoute, ...) out of their pinned Go modules, for the e2e tests
# of spec.routing (tests/e2e/test_inference_pool.py). Nothing third-party is committed.
#
# Output goes to a versioned cache OUTSIDE the clone (default
# ~/.cache/shardwise/gie/<gie>-gatewayapi<gw>), like hack/build-control-plane.sh. Prints the folder.
set -euo pipefail

GIE_VERSION="${GIE_VERSION:-v1.5.0}"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.4.0}"
CACHE_ROOT="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}"
OUT="$CACHE_ROOT/gie/$GIE_VERSION-gatewayapi$GATEWAY_API_VERSION"
WANT=(inferencepools.yaml gateway-api-standard.yaml)

have_all() { for f in "${WANT[@]}"; do [ -s "$OUT/$f" ] || return 1; done; }
if have_all; then echo "$OUT"; exit 0; fi

mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
if have_all; then echo "$OUT"; exit 0; fi
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"  # `go mod download` of a module needs no module of its own, only a folder without one
dir_of() { go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }

gie="$(dir_of "sigs.k8s.io/gateway-api-inference-extension@$GIE_VERSION")"
cp "$gie/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$OUT/inferencepools.yaml.tmp"
mv "$OUT/inferencepools.yaml.tmp" "$OUT/inferencepools.yaml"

gw="$(dir_of "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")"
for f in "$gw"/config/crd/standard/*.yaml; do echo "---"; cat "$f"; done > "$OUT/gateway-api-standard.yaml.tmp"
mv "$OUT/gateway-api-standard.yaml.tmp" "$OUT/gateway-api-standard.yaml"
echo "$OUT"
