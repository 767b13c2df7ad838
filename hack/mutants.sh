#!/usr/bin/env bash
# Mutation testing of the update engine: cargo-mutants changes the engine's code one mutation at a time
# (an operator flipped, a body replaced by a default, a match arm deleted) and runs the engine's tests
# against each: its unit tests and the model check's quick runs (`cargo test --lib`, profile `mutants`,
# see .cargo/mutants.toml). A mutant that no test fails is missed.
#
#   hack/mutants.sh                 every file of the engine (about 1,000 mutants: hours on 2 cores)
#   hack/mutants.sh FILE...         these files (paths from the repository's root)
#   hack/mutants.sh --diff [BASE]   the code a change touches since BASE (default HEAD~1): what CI runs
#   hack/mutants.sh --report        the figures of the last run again, without running
#
# Prints the figures and the score: mutants caught (a test failed, or the tests ran past the timeout) over
# the viable ones (those that build), and the same without the mutants listed as equivalent. A missed
# mutant is either killed by a new test or listed in
# .cargo/mutants-equivalent.tsv with the reason no test can tell it from the original (file, mutation
# without its line and column, reason; tab-separated; a mutation `* in FUNCTION` lists every mutant of that
# function, for the deliberate bugs' own code). Fails when a missed mutant is not listed there, and, for
# a run over whole files, when the score is under MUTANTS_MIN_SCORE percent (95; a change's few mutants
# are held to the first rule only).
#
# cargo-mutants (pinned, MUTANTS_VERSION) is installed into the cache once; the mutants build in their own
# target directory there, so the dependencies are built once per cache. MUTANTS_OUT is where cargo-mutants
# writes mutants.out (default: the cache); MUTANTS_JOBS its parallel builds (default 1: 2 cores).
# In --diff mode at most MUTANTS_MAX (30) mutants run: a larger change runs one shard of them, chosen by
# its commit, so that successive changes cover the others. MUTANTS_BUDGET (seconds, unset: none) bounds the
# run's time, as CI's own time is bounded: the run stops when it is spent, the mutants tested by then are
# judged as above, and the figures say how many were left untested.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
cache="${GKO_CACHE_DIR:-$HOME/.cache/gluesync-operator}"
version="${MUTANTS_VERSION:-27.1.0}"
tools="$cache/tools"
out="${MUTANTS_OUT:-$cache/mutants}"
min_score="${MUTANTS_MIN_SCORE:-95}"
max="${MUTANTS_MAX:-30}"
equivalent=".cargo/mutants-equivalent.tsv"

# The engine's files, and what is not the engine (its tests, their fixtures, the model checker and its
# deliberate bugs, which are the tests).
engine=(crates/gluesync-engine/src/update/*.rs crates/gluesync-engine/src/update/disaster/patch.rs crates/gluesync-engine/src/api/{mod,spec,status,step,disaster}.rs)
not_engine=(tests.rs fixtures.rs model.rs mutants.rs)

args=()
diff_mode=0
report_only=0
if [ "${1:-}" = "--report" ]; then
  report_only=1
elif [ "${1:-}" = "--diff" ]; then
  diff_mode=1
  base="${2:-HEAD~1}"
  patch="$out/change.diff"
  mkdir -p "$out"
  git diff "$base" -- "${engine[@]}" > "$patch"
  if [ ! -s "$patch" ]; then
    echo "mutants: the change since $base touches no engine code: nothing to mutate"
    exit 0
  fi
  args+=(--in-diff "$patch")
  files=("${engine[@]}")
elif [ "$#" -gt 0 ]; then
  files=("$@")
else
  files=("${engine[@]}")
fi
# Installed once a run has something to mutate (a change that touches no engine code costs nothing).
export PATH="$tools/bin:$PATH"
if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $version"; then
  echo "mutants: installing cargo-mutants $version into $tools (once)" >&2
  cargo install -q --locked --version "$version" --root "$tools" cargo-mutants
fi

for f in "${files[@]}"; do args+=(-f "$f"); done
for f in "${not_engine[@]}"; do args+=(-e "$f"); done

if [ "$diff_mode" = 1 ] && [ "$report_only" = 0 ]; then
  n="$(cargo mutants --list "${args[@]}" | wc -l)"
  if [ "$n" -eq 0 ]; then
    echo "mutants: the change since $base touches no mutable engine code"
    exit 0
  fi
  if [ "$n" -gt "$max" ]; then
    shards=$(((n + max - 1) / max))
    shard=$(($(git rev-parse HEAD | cut -c1-7 | xargs -I{} printf '%d' 0x{}) % shards))
    echo "mutants: $n mutants in the change; running shard $shard of $shards"
    args+=(--shard "$shard/$shards")
  fi
fi

mkdir -p "$out"
# MUTANTS_TARGET_DIR: where the mutants build (default: the cache's own folder, so that a long run never
# holds the target directory a developer builds in; CI gives it the clone's, where `make test` built the
# model check with the same profile, so the dependencies are not built twice).
export CARGO_TARGET_DIR="${MUTANTS_TARGET_DIR:-$cache/mutants/target}"
status=0
if [ "$report_only" = 0 ]; then
  # Runs share the target directory: a second one would test the first one's mutated build.
  mkdir -p "$CARGO_TARGET_DIR"
  exec 9>"$CARGO_TARGET_DIR/.mutants-run.lock"
  if ! flock -n 9; then
    echo "mutants: another run holds $CARGO_TARGET_DIR (they share it); wait for it to end" >&2
    exit 1
  fi
  budget=()
  if [ -n "${MUTANTS_BUDGET:-}" ]; then
    # SIGINT is cargo-mutants' own way to stop: it ends the mutant under test and keeps the outcomes so far.
    budget=(timeout -s INT -k 120 "$MUTANTS_BUDGET")
  fi
  "${budget[@]}" cargo mutants --profile mutants --jobs "${MUTANTS_JOBS:-1}" --output "$out" "${args[@]}" \
    || status=$?
fi
# 0: all caught; 2: some missed; 3: some timed out; 124: stopped by MUTANTS_BUDGET; anything else:
# cargo-mutants itself failed.
stopped=0
case "$status" in
  0 | 2 | 3) ;;
  124)
    stopped=1
    echo "mutants: MUTANTS_BUDGET ($MUTANTS_BUDGET s) spent: the run stopped; judging the mutants it tested"
    ;;
  *)
    echo "mutants: cargo-mutants failed ($status); see $out/mutants.out/debug.log" >&2
    exit "$status"
    ;;
esac

count() {
  local f="$out/mutants.out/$1.txt"
  if [ -f "$f" ]; then grep -c . "$f" || true; else echo 0; fi
}
caught="$(count caught)"
timeout="$(count timeout)"
missed="$(count missed)"
unviable="$(count unviable)"

# A missed mutant's key: its file and mutation without line and column.
key() { sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1\t/'; }
listed="$(mktemp)"
trap 'rm -f "$listed"' EXIT
grep -v '^#' "$equivalent" 2>/dev/null | cut -f1,2 | sort -u > "$listed" || true
unlisted=0
equiv=0
if [ -f "$out/mutants.out/missed.txt" ]; then
  while IFS= read -r m; do
    k="$(printf '%s\n' "$m" | key)"
    # The function a mutant is in: named after " in ", or, for a whole body replaced, after "replace ".
    case "$k" in
      *" in "*) fn="${k##* in }" ;;
      *) fn="$(printf '%s\n' "$k" | sed -E 's/^[^\t]*\treplace ([A-Za-z0-9_:<>]+).*/\1/')" ;;
    esac
    whole="${k%%$'\t'*}"$'\t'"* in $fn"
    if grep -qxF -e "$k" -e "$whole" "$listed"; then
      equiv=$((equiv + 1))
    else
      [ "$unlisted" = 0 ] && echo "mutants: missed, and not listed in $equivalent:"
      echo "  $m"
      unlisted=$((unlisted + 1))
    fi
  done < "$out/mutants.out/missed.txt"
fi

viable=$((caught + timeout + missed))
if [ "$stopped" = 1 ]; then
  all="$(cargo mutants --list "${args[@]}" | wc -l)"
  echo "mutants: $((viable + unviable)) of $all mutants tested before the budget ran out; the rest were not tested"
fi
percent() { awk -v c="$1" -v v="$2" 'BEGIN { if (v > 0) printf "%.1f", 100 * c / v; else printf "100.0" }'; }
score="$(percent $((caught + timeout)) "$viable")"
score_equiv="$(percent $((caught + timeout)) $((viable - equiv)))"
echo "mutants: $viable viable: $caught caught, $timeout timed out, $missed missed ($equiv of them listed as equivalent); $unviable unviable"
echo "mutants: score $score % of the viable, $score_equiv % without the equivalent ones (target $min_score %)"
fail=0
if [ "$unlisted" -gt 0 ]; then
  echo "mutants: $unlisted missed mutants are neither caught by a test nor listed as equivalent" >&2
  fail=1
fi
if [ "$diff_mode" = 0 ] && awk -v s="$score" -v m="$min_score" 'BEGIN { exit !(s < m) }'; then
  echo "mutants: the score is under $min_score %" >&2
  fail=1
fi
exit "$fail"
