# Sourced by hack/test.sh and hack/chaos.sh, from the repository's root: installs what is missing, builds
# the local control plane, starts it unless one runs, and stops it on exit only if it started it here,
# with the control planes of their own that some tests start beside it (`<its folder>-<name>`,
# crates/test-support: own_control_plane).
hack/deps.sh
hack/controlplane.sh build
if hack/controlplane.sh status >/dev/null 2>&1; then
  started=no
else
  started=yes
  hack/controlplane.sh up
fi
stop() {
  [ "$started" = yes ] || return 0
  local own
  for own in "${GKO_CLUSTER_DIR:-/tmp/gko-cluster}"-*/; do
    [ -d "$own" ] && GKO_CLUSTER_DIR=${own%/} hack/controlplane.sh down || true
  done
  hack/controlplane.sh down || true
}
trap stop EXIT
