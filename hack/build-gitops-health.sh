#!/usr/bin/env bash
# Builds hack/gitops-health (kstatus from sigs.k8s.io/cli-utils plus cel-go for Flux's
# healthCheckExprs) from the Go module proxy into ~/.cache/shardwise, keyed by the hash of its
# sources, so a fresh clone reuses an earlier build. Prints the binary's path.
set -euo pipefail
here="$(cd "$(dirname "$0")/gitops-health" && pwd)"
key="$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
out="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}/gitops-health/$key"
if [ ! -x "$out/gitops-health" ]; then
  mkdir -p "$out"
  exec 9>"$out.lock"
  flock 9
  if [ ! -x "$out/gitops-health" ]; then
    echo "[build-gitops-health] building kstatus + cel-go checker" >&2
    (cd "$here" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" \
      -o "$out/gitops-health.tmp" .)
    mv "$out/gitops-health.tmp" "$out/gitops-health"
  fi
fi
echo "$out/gitops-health"
