#!/usr/bin/env bash
# Builds the Gateway API Inference Extension's endpoint picker (cmd/epp) and body-based router
# (cmd/bbr) from their pinned Go module, for tests/e2e/test_gie_gateway.py (an Envoy set up as a
# GIE gateway: BBR, then a route on X-Gateway-Base-Model-Name, then the EPP). v1.5.0 is the last
# GIE release that carries both commands. About 4 minutes on 2 cores, two ~80 MB static binaries.
#
# Output goes to a versioned cache OUTSIDE the clone (default ~/.cache/shardwise/gie/bin-<version>),
# like hack/build-control-plane.sh. Prints the folder. `go install pkg@version` is refused here
# (the proxy does not list the module's versions for its deprecation check), so it builds from a
# throwaway module that requires it.
set -euo pipefail

GIE_VERSION="${GIE_VERSION:-v1.5.0}"
CACHE_ROOT="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}"
OUT="$CACHE_ROOT/gie/bin-$GIE_VERSION"
built() { [ -s "$OUT/epp" ] && [ -s "$OUT/bbr" ]; }
if built; then echo "$OUT"; exit 0; fi
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
if built; then echo "$OUT"; exit 0; fi
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
module=sigs.k8s.io/gateway-api-inference-extension
printf 'module shardwise.local/gie\ngo 1.25.0\nrequire %s %s\n' "$module" "$GIE_VERSION" > go.mod
printf '//go:build tools\npackage tools\nimport (\n\t_ "%s/cmd/epp"\n\t_ "%s/cmd/bbr"\n)\n' "$module" "$module" > tools.go
for cmd in epp bbr; do
  if [ -s "$OUT/$cmd" ]; then continue; fi
  echo "[build-gie] building the GIE $GIE_VERSION $cmd (minutes on 2 cores)" >&2
  go build -o "$OUT/$cmd.tmp" "$module/cmd/$cmd"
  mv "$OUT/$cmd.tmp" "$OUT/$cmd"
done
echo "$OUT"
