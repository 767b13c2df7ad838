#!/usr/bin/env bash
# Fuzzes the Conductor API's request handling, each target for a bounded time (default 60 s): libFuzzer through
# cargo-fuzz, on the stable toolchain (RUSTC_BOOTSTRAP lets cargo-fuzz pass its flags; no sanitizer).
# A crash leaves its input in fuzz/artifacts/ and fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-60}

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd fuzz
# conductor_request: the body of POST /containers; conductor_http: whole requests through the API.
for target in conductor_request conductor_http; do
  mkdir -p "$work/$target"
  echo "fuzzing $target for $seconds s"
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run --dev -s none "$target" "$work/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$work/$target.log" 2>&1; then
    # What failed, and the input that made it fail (also left in fuzz/artifacts/).
    grep -A3 -E "panicked at|ERROR: libFuzzer|^error" "$work/$target.log" || tail -n 40 "$work/$target.log"
    grep -A2 -E "^Failing input|^Reproduce with" "$work/$target.log" || true
    exit 1
  fi
  tail -n 6 "$work/$target.log"
done
