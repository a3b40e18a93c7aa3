#!/usr/bin/env bash
# Builds the real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd, kwok and helm from pinned Go module versions, and copies the
# LeaderWorkerSet CRD out of the sigs.k8s.io/lws module.
#
# Output goes to a versioned cache OUTSIDE the clone (default ~/.cache/shardwise/k8s/<version>),
# so a fresh clone (CI) reuses binaries built earlier on the same machine. Prints the folder.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0, so `go install pkg@version` refuses
# it; we build from a throwaway module whose replace block maps every staging module to the
# matching published v0.X.Y (the list is read from kubernetes' own go.mod, never hand-kept).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"
LWS_VERSION="${LWS_VERSION:-v0.7.0}"
CACHE_ROOT="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}"
OUT="$CACHE_ROOT/k8s/$K8S_VERSION-kwok$KWOK_VERSION-helm$HELM_VERSION-lws$LWS_VERSION"
WANT=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm lws-crd.yaml)

have_all() { for f in "${WANT[@]}"; do [ -s "$OUT/$f" ] || return 1; done; }
if have_all; then echo "$OUT"; exit 0; fi

# One build at a time per cache: parallel test runs (several clones or worktrees) wait for the
# first build instead of each compiling Kubernetes on the same two cores.
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
if have_all; then echo "$OUT"; exit 0; fi
log() { echo "[build-control-plane] $*" >&2; }
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

staging_v="v0.${K8S_VERSION#v1.}"
kmod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"

if [ ! -s "$OUT/kube-apiserver" ] || [ ! -s "$OUT/etcd" ]; then
  log "building Kubernetes $K8S_VERSION and etcd (cold: many minutes on 2 cores)"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  {
    echo "module shardwise.local/controlplane"
    echo "go 1.24.0"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" \
      | awk -v v="$staging_v" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod
  etcd_v="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$kmod")"
  cat > tools.go <<GO
//go:build tools
package tools
import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "go.etcd.io/etcd/server/v3"
)
GO
  go get "go.etcd.io/etcd/server/v3@$etcd_v" >&2
  go mod tidy >&2 || true
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$work/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3 >&2
  # Go names a binary after the last path element that is not a major-version suffix.
  mv "$work/bin/server" "$work/bin/etcd"
  cp "$work/bin/"* "$OUT/"
fi

if [ ! -s "$OUT/kwok" ]; then
  log "building kwok $KWOK_VERSION"
  GOBIN="$work/gobin" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
  cp "$work/gobin/kwok" "$OUT/"
fi

if [ ! -s "$OUT/helm" ]; then
  log "building helm $HELM_VERSION"
  GOBIN="$work/gobin" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  cp "$work/gobin/helm" "$OUT/"
fi

if [ ! -s "$OUT/lws-crd.yaml" ]; then
  lws_dir="$(go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cp "$lws_dir/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "$OUT/lws-crd.yaml"
fi

have_all
echo "$OUT"
