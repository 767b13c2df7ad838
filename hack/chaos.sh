#!/usr/bin/env bash
# Random fault schedules against GKO for $1 seconds (default 120), from the seed $CHAOS_SEED (default: the
# time): generated histories of spec changes and faults on the local control plane, GKO's invariants
# checked after each; prints how many histories, faults and checks ran. A failing history is shrunk and
# saved under crates/gluesync-operator/tests/chaos-regressions/, which the test suite replays.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

. hack/cluster-session.sh
eval "$(hack/controlplane.sh env)"

CHAOS_SECONDS=${1:-120} cargo test --locked -p gluesync-operator --test cluster -- \
  --ignored --nocapture --test-threads 1 chaos::generated_histories_keep_every_invariant
