#!/usr/bin/env bash
# Builds GKO as the previous release shipped it, once, and prints the binary's path: for the tests that
# start an update under that release and let this one finish it (tests/cluster/upgrade.rs).
#
# The release is the tag PREVIOUS_RELEASE (v0.3.0); a clone without tags uses the commit the tag names,
# PREVIOUS_RELEASE_COMMIT. The sources come from git (`git archive`), so the clone must hold that commit
# (a shallow clone does not: the script says so). The build is cached under
# ${GKO_CACHE_DIR:-~/.cache/gluesync-operator}/release/<commit>/ like the control plane's: CI pays for it
# once per cache.
set -euo pipefail

release="${PREVIOUS_RELEASE:-v0.3.0}"
fallback="${PREVIOUS_RELEASE_COMMIT:-c890254a49e747f3f186947572b57e340d2cb4c6}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GKO_CACHE_DIR:-$HOME/.cache/gluesync-operator}"

commit="$(git -C "$repo" rev-parse -q --verify "refs/tags/$release^{commit}" 2>/dev/null || true)"
if [ -z "$commit" ]; then
  if ! git -C "$repo" cat-file -e "$fallback^{commit}" 2>/dev/null; then
    echo "previous-release: neither the tag $release nor the commit $fallback is in this clone (a shallow clone?): fetch them, e.g. git fetch --tags --unshallow" >&2
    exit 1
  fi
  commit="$fallback"
fi

dir="$cache/release/$commit"
binary="$dir/target/debug/gluesync-operator"
if [ ! -x "$binary" ]; then
  echo "previous-release: building GKO $release ($commit) into $dir (once)" >&2
  rm -rf "$dir/src"
  mkdir -p "$dir/src"
  git -C "$repo" archive "$commit" | tar -x -C "$dir/src"
  (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build -q --locked -p gluesync-operator --bin gluesync-operator) >&2
  rm -rf "$dir/src"
fi
echo "$binary"
