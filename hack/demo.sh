#!/usr/bin/env bash
# The local demo: the local control plane, a sample Gluesync install in namespace gluesync-demo, and GKO
# running on it. GKO keeps running until Ctrl-C (or stops at the end when DEMO_EXIT=1 or there is no
# terminal), and the cluster stays up for kubectl until `make cluster-down`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ns=${DEMO_NAMESPACE:-gluesync-demo}
logs=${GKO_CLUSTER_DIR:-/tmp/gko-cluster}/logs

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

hack/deps.sh
hack/controlplane.sh up
eval "$(hack/controlplane.sh env)"

say "building GKO"
cargo build -q -p gluesync-operator --bin gluesync-operator

say "installing the GluesyncPlatform CRD and a sample install in namespace $ns"
kubectl apply --server-side -f deploy/crd.yaml >/dev/null
kubectl wait --for=condition=Established crd/gluesyncplatforms.gluesync.molo17.com --timeout=30s >/dev/null
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$ns" apply --server-side -f examples/sample/install.yaml -f examples/sample/platform.yaml

say "starting GKO (log: $logs/gluesync-operator.log)"
mkdir -p "$logs"
target/debug/gluesync-operator run --namespace "$ns" --metrics-addr 127.0.0.1:18080 \
  >"$logs/gluesync-operator.log" 2>&1 &
gko=$!
trap 'kill $gko 2>/dev/null || true' EXIT

kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.phase}'=Current --timeout=60s >/dev/null
kubectl -n "$ns" wait gsp/gluesync --for=condition=Ready --timeout=60s >/dev/null
kubectl -n "$ns" get gsp

say "components GKO manages"
kubectl -n "$ns" get gsp gluesync \
  -o jsonpath='{range .status.components[*]}{.name}{"\t"}{.type}{"\t"}{.image}{"\t"}{.ready}{"\n"}{end}'

say "someone changes Chronos's image by hand: status.components follows"
kubectl -n "$ns" set image statefulset/gluesync-gluesync-chronos chronos=molo17/gluesync-chronos:0.3.3 >/dev/null
kubectl -n "$ns" wait gsp/gluesync --timeout=30s \
  --for=jsonpath='{.status.components[?(@.name=="gluesync-gluesync-chronos")].version}'=0.3.3 >/dev/null
kubectl -n "$ns" get gsp gluesync \
  -o jsonpath='{range .status.components[*]}{.name}{"\t"}{.version}{"\t"}{.ready}{"\n"}{end}'
kubectl -n "$ns" set image statefulset/gluesync-gluesync-chronos chronos=molo17/gluesync-chronos:0.3.2 >/dev/null

cat <<EOF

GKO runs on namespace $ns. In another terminal:
  eval "\$(hack/controlplane.sh env)"
  kubectl -n $ns get gsp -w
  kubectl -n $ns describe gsp gluesync
  curl -s 127.0.0.1:18080/metrics
Stop with Ctrl-C; \`make cluster-down\` stops the control plane.
EOF

if [ "${DEMO_EXIT:-0}" = 1 ] || [ ! -t 0 ]; then
  exit 0
fi
wait "$gko"
