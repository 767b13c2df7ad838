# Sourced by hack/test.sh and hack/chaos.sh, from the repository's root: installs what is missing, builds
# the local control plane, starts it unless one runs, and stops it on exit only if it started it here.
hack/deps.sh
hack/controlplane.sh build
if hack/controlplane.sh status >/dev/null 2>&1; then
  started=no
else
  started=yes
  hack/controlplane.sh up
fi
stop() { [ "$started" = yes ] && hack/controlplane.sh down || true; }
trap stop EXIT
