#!/usr/bin/env bash
# Fuzzes the Conductor API's request parsing for a bounded time (default 60 s): libFuzzer through
# cargo-fuzz, on the stable toolchain (RUSTC_BOOTSTRAP lets cargo-fuzz pass its flags; no sanitizer).
# A crash leaves its input in fuzz/artifacts/ and fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-60}

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cd fuzz
RUSTC_BOOTSTRAP=1 cargo fuzz run --dev -s none conductor_request "$corpus" seeds/conductor_request -- \
  -max_total_time="$seconds" -print_final_stats=1 2>&1 | tail -n 12
