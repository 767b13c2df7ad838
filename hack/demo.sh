#!/usr/bin/env bash
# The local demo: the local control plane, a sample Gluesync install at Core Hub 2.3.2.1 in namespace
# gluesync-demo, the Core Hub simulator with a few hundred pipelines, and GKO; then an update to 2.3.2.2
# that you watch with `kubectl get gsp -w`, and its history and events afterwards.
#
# GKO and the simulator keep running until Ctrl-C (or stop at the end when DEMO_EXIT=1 or there is no
# terminal); the cluster stays up for kubectl until `make cluster-down`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ns=${DEMO_NAMESPACE:-gluesync-demo}
pipelines=${DEMO_PIPELINES:-300}
logs=${GKO_CLUSTER_DIR:-/tmp/gko-cluster}/logs
sim_port=17170

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

hack/deps.sh
hack/controlplane.sh up
eval "$(hack/controlplane.sh env)"

say "building GKO and the Core Hub simulator"
cargo build -q -p gluesync-operator -p gluesync-simulator

mkdir -p "$logs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

say "starting the Core Hub simulator with $pipelines running pipelines (log: $logs/simulator.log)"
target/debug/gluesync-simulator --addr 127.0.0.1:$sim_port --admin-addr 127.0.0.1:$((sim_port + 1)) \
  --pipelines "$pipelines" \
  --catalog gluesync-core-hub=2.3.2.2 --catalog gluesync-chronos=0.3.3 \
  --catalog grafana=11.2.0 --catalog prometheus=2.53.0 >"$logs/simulator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$((sim_port + 1))/_sim/state" >/dev/null && break; sleep 0.1; done

say "installing the GluesyncPlatform CRD and a sample install at Core Hub 2.3.2.1 in namespace $ns"
kubectl apply --server-side -f deploy/crd.yaml >/dev/null
kubectl wait --for=condition=Established crd/gluesyncplatforms.gluesync.molo17.com --timeout=30s >/dev/null
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# A previous run's platform goes; a finalizer left by an interrupted update would hold it, with no GKO
# running to take it off.
kubectl -n "$ns" patch gsp gluesync --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
kubectl -n "$ns" delete gsp gluesync --ignore-not-found >/dev/null
kubectl -n "$ns" apply --server-side --force-conflicts -f examples/sample/install.yaml >/dev/null
kubectl -n "$ns" create secret generic corehub-credentials --from-literal=username=admin \
  --from-literal=password=admin --dry-run=client -o yaml | kubectl -n "$ns" apply -f - >/dev/null
kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: gluesync.molo17.com/v1alpha1
kind: GluesyncPlatform
metadata:
  name: gluesync
spec:
  version: 2.3.2.1
  coreHub:
    url: http://127.0.0.1:$sim_port
    credentialsSecret: corehub-credentials
  catalog:
    url: http://127.0.0.1:$sim_port
  stabilityWindowSeconds: 5
EOF

say "starting GKO (log: $logs/gluesync-operator.log)"
target/debug/gluesync-operator run --namespace "$ns" --metrics-addr 127.0.0.1:18080 \
  --allowed-secrets corehub-credentials --allowed-corehub-urls "http://127.0.0.1:$sim_port" \
  --conductor-addr 127.0.0.1:$((sim_port + 2)) >"$logs/gluesync-operator.log" 2>&1 &
pids+=($!)
kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.phase}'=UpdateAvailable --timeout=60s >/dev/null
kubectl -n "$ns" get gsp

say "updating Core Hub to 2.3.2.2 (kubectl -n $ns get gsp -w)"
kubectl -n "$ns" get gsp -w --output-watch-events=false &
watch=$!
kubectl -n "$ns" patch gsp gluesync --type merge -p '{"spec":{"version":"2.3.2.2"}}' >/dev/null
kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.lastAttempt.target}'=2.3.2.2 --timeout=300s >/dev/null
sleep 1
kill "$watch" 2>/dev/null || true
wait "$watch" 2>/dev/null || true

say "the last attempt"
kubectl -n "$ns" get gsp gluesync -o jsonpath='{.status.lastAttempt.result}{": "}{.status.lastAttempt.message}{"\n"}{range .status.lastAttempt.results[*]}{"  "}{.name}{"\t"}{.status}{"\t"}{.from}{" -> "}{.to}{"\n"}{end}'
echo "  pipelines paused and resumed: $(kubectl -n "$ns" get gsp gluesync -o jsonpath='{.status.lastAttempt.resumedPipelines}' | tr ',' '\n' | grep -c .)"

say "history"
kubectl -n "$ns" get gsp gluesync \
  -o jsonpath='{range .status.history[*]}{.finishedAt}{"\t"}{.from}{" -> "}{.to}{"\t"}{.result}{"\t"}{.message}{"\n"}{end}'

say "events"
kubectl -n "$ns" get events --field-selector involvedObject.kind=GluesyncPlatform \
  --sort-by=.eventTime -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message 2>/dev/null \
  || kubectl -n "$ns" get events --field-selector involvedObject.kind=GluesyncPlatform

say "Core Hub 2.3.2.3 is released; the Core Hub UI asks GKO to update all, through the Conductor API"
curl -sf -X PUT "http://127.0.0.1:$((sim_port + 1))/_sim/catalog/gluesync-core-hub" -H 'content-type: application/json' \
  -d '{"latestVersionGA":"2.3.2.3","latestVersionBeta":"2.3.2.3","latestVersionAlpha":"2.3.2.3"}'
kubectl -n "$ns" annotate gsp gluesync --overwrite gluesync.molo17.com/check-now="$(date +%s)" >/dev/null
kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.available}'=2.3.2.3 --timeout=30s >/dev/null
kubectl -n "$ns" get gsp
token=$(curl -sf -X POST "http://127.0.0.1:$sim_port/authentication/login" -H 'content-type: application/json' \
  -d '{"username":"manager","password":"manager"}' | sed -n 's/.*"apiToken":"\([^"]*\)".*/\1/p')
echo '$ curl -X POST .../conductor/api/containers -d {"action":"update","ids":[],"releaseChannel":"ga"}'
curl -s -X POST "http://127.0.0.1:$((sim_port + 2))/conductor/api/containers" -H "Authorization: Bearer $token" \
  -H 'content-type: application/json' -d '{"action":"update","ids":[],"releaseChannel":"ga"}'
echo
kubectl -n "$ns" get gsp

cat <<EOF

GKO runs on namespace $ns, with the simulator's Core Hub at http://127.0.0.1:$sim_port. In another terminal:
  eval "\$(hack/controlplane.sh env)"
  kubectl -n $ns get gsp -w
  kubectl -n $ns patch gsp gluesync --type merge -p '{"spec":{"version":"2.3.2.3-crash"}}'   # a failing update, rolled back
  kubectl -n $ns describe gsp gluesync
  curl -s 127.0.0.1:$((sim_port + 1))/_sim/state | head -c 300; curl -s 127.0.0.1:18080/metrics
  curl -s 127.0.0.1:$((sim_port + 2))/conductor/api/health   # the Conductor API the Core Hub UI calls
Stop with Ctrl-C; \`make cluster-down\` stops the control plane.
EOF

if [ "${DEMO_EXIT:-0}" = 1 ] || [ ! -t 0 ]; then
  exit 0
fi
wait
