#!/usr/bin/env bash
# Debian packages the build and tests need; installs only what is missing (as root, or via sudo).
set -euo pipefail
need=()
command -v openssl >/dev/null || need+=(openssl)
command -v git >/dev/null || need+=(git)
command -v make >/dev/null || need+=(make)
command -v redis-server >/dev/null || need+=(redis-server)  # the gateway's quota store in tests
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# promtool and a Prometheus server (metrics and rules lint, tests/e2e/test_observability.py) and
# headless Chromium (the console's e2e test): ~185 MB of .debs with their dependencies
# (prometheus 19 MB, chromium 81 MB, ~160 packages in all), ~40 s to download and install.
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
if ((${#need[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${need[@]}"
fi
command -v go >/dev/null || { echo "Go (1.24 or newer) is required to build the control plane" >&2; exit 1; }
