#!/usr/bin/env bash
# The whole test suite: unit tests and cluster tests on the local control plane, which this script builds
# (once, into a cache outside the repo) and starts. A cluster it started is stopped at the end.
#
#   hack/test.sh                    every test of the workspace, then the full model check
#   hack/test.sh FILTER...          only the tests whose names match, and no model check: `update::` (a
#                                   module of the cluster tests), a test's name, or any cargo-nextest
#                                   filter (`-E 'test(/^helm::/)'`, `--run-ignored only`)
#   hack/test.sh --unit             the tests that need no cluster (`make test-unit`), no model check
#
# cargo-nextest runs every test as a process of its own, GKO_TEST_THREADS (default 8) at once: the cluster
# tests spend most of their time waiting on the control plane, each in a namespace of its own; the few that
# change what the whole cluster shares run alone (.config/nextest.toml). Each phase's time is printed at
# the end, and appended to GKO_PHASE_LOG when it is set (.ci/run prints them with its own).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

phases=()
phase_start=$SECONDS
# Records the time since the last mark as the phase $1.
mark() {
  phases+=("$1 $((SECONDS - phase_start))")
  [ -z "${GKO_PHASE_LOG:-}" ] || echo "test:$1 $((SECONDS - phase_start))" >>"$GKO_PHASE_LOG"
  phase_start=$SECONDS
}
print_phases() {
  local p
  for p in "${phases[@]}"; do printf 'test.sh phase %-14s %5d s\n' "${p% *}" "${p##* }"; done
}

unit=0
if [ "${1:-}" = --unit ]; then
  unit=1
  shift
fi
hack/deps.sh
export PATH="${GKO_CACHE_DIR:-$HOME/.cache/gluesync-operator}/tools/bin:$PATH"
threads=${GKO_TEST_THREADS:-8}

# The tests that need no cluster: every crate's own unit tests, the krew manifest, and the Argo CD health
# check (run by a real Lua).
unit_filter='kind(lib) | kind(bin) | binary(manifest) | binary(dependencies) | (binary_id(gluesync-operator::cluster) & test(/^argocd_health::/))'

if [ "$unit" = 1 ]; then
  cargo nextest run --workspace --locked --no-fail-fast -E "$unit_filter" "$@"
  exit
fi

. hack/cluster-session.sh
mark controlplane

# Everything the tests run, built before any test starts, so that no test's deadline pays for a build:
# the test binaries (and the model check's, optimised), the previous release (tests/cluster/upgrade.rs, cached) and the kit's dependency on
# GKO's chart (tests read it, none writes it while others run).
cargo test --workspace --locked --no-run -q
if [ $# -eq 0 ]; then
  cargo test --profile mutants --locked -p gluesync-engine --lib --no-run -q
fi
hack/previous-release.sh >/dev/null
helm_bin="$(hack/controlplane.sh bin)/helm"
"$helm_bin" dependency build charts/gluesync-kit >/dev/null
mark build

log=$(mktemp)
trap 'rm -f "$log"; stop' EXIT
status=0
cargo nextest run --workspace --locked --no-fail-fast --test-threads "$threads" "$@" 2>&1 | tee "$log" \
  || status=$?
mark tests
# The model check of the update, to its full bound: optimised (profile `mutants`), its runs on every core,
# under two minutes on 2.
if [ $# -eq 0 ]; then
  cargo test --profile mutants --locked -p gluesync-engine --lib update::model -- --ignored --nocapture 2>&1 \
    | tee -a "$log" || status=$?
  mark model-check
fi
print_phases
# One closing line for the whole run: nextest's summary and the model check's.
awk '/^ *Summary \[/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     /^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
