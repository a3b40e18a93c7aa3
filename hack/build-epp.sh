#!/usr/bin/env bash
# Builds the Gateway API Inference Extension's endpoint picker (cmd/epp) from its pinned Go module,
# for an e2e behind a GIE-style gateway (not yet written: docs/gateway.md). v1.5.0 is the last
# GIE release that carries cmd/epp. About 4 minutes on 2 cores, an 80 MB static binary.
#
# Output goes to a versioned cache OUTSIDE the clone (default ~/.cache/shardwise/gie/bin-<version>),
# like hack/build-control-plane.sh. Prints the folder. `go install pkg@version` is refused here
# (the proxy does not list the module's versions for its deprecation check), so it builds from a
# throwaway module that requires it.
set -euo pipefail

GIE_VERSION="${GIE_VERSION:-v1.5.0}"
CACHE_ROOT="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}"
OUT="$CACHE_ROOT/gie/bin-$GIE_VERSION"
if [ -s "$OUT/epp" ]; then echo "$OUT"; exit 0; fi
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
if [ -s "$OUT/epp" ]; then echo "$OUT"; exit 0; fi
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module shardwise.local/epp\ngo 1.25.0\nrequire sigs.k8s.io/gateway-api-inference-extension %s\n' "$GIE_VERSION" > go.mod
printf '//go:build tools\npackage tools\nimport _ "sigs.k8s.io/gateway-api-inference-extension/cmd/epp"\n' > tools.go
echo "[build-epp] building the GIE $GIE_VERSION endpoint picker (minutes on 2 cores)" >&2
go build -o "$OUT/epp.tmp" sigs.k8s.io/gateway-api-inference-extension/cmd/epp
mv "$OUT/epp.tmp" "$OUT/epp"
echo "$OUT"
