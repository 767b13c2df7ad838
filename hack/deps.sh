#!/usr/bin/env bash
# Installs what building and testing GKO needs on a fresh machine, from the package registries only:
# Debian's packages for the tools the control-plane script calls, and rustfmt and clippy for Rust.
set -euo pipefail

missing=()
for tool in openssl:openssl curl:curl flock:util-linux make:make tmux:tmux; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}" >/dev/null; fi
fi
command -v go >/dev/null 2>&1 || { echo "[deps] the Go toolchain (1.26 or later) is needed to build the local control plane" >&2; exit 1; }
command -v cargo >/dev/null 2>&1 || { echo "[deps] the Rust toolchain (rustup, 1.89 or later) is needed" >&2; exit 1; }
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component"
  fi
done
# cargo-nextest runs the test suite (hack/test.sh): pinned, built once into the cache outside the repo
# (tools/bin, beside cargo-mutants), so CI pays for it once per cache.
nextest_version=0.9.151
tools="${GKO_CACHE_DIR:-$HOME/.cache/gluesync-operator}/tools"
if ! "$tools/bin/cargo-nextest" nextest --version 2>/dev/null | grep -q "^cargo-nextest $nextest_version"; then
  echo "[deps] installing cargo-nextest $nextest_version into $tools (once)" >&2
  # Without its self-update (an HTTP client and a TLS stack of its own: minutes of build, unused here).
  cargo install -q --locked --version "$nextest_version" --root "$tools" --no-default-features \
    --features default-no-update cargo-nextest
fi
