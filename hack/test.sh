#!/usr/bin/env bash
# The whole test suite: unit tests and cluster tests on the local control plane, which this script builds
# (once, into a cache outside the repo) and starts. A cluster it started is stopped at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

. hack/cluster-session.sh

log=$(mktemp)
status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The model check of the update, to its full bound: optimised, its runs on every core, about 3.5 minutes on 2.
if [ $# -eq 0 ]; then
  cargo test --release --locked -p gluesync-operator --lib update::model -- --ignored --nocapture 2>&1 \
    | tee -a "$log" || status=$?
fi
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
