#!/usr/bin/env bash
# The local demo: the local control plane, the sample Gluesync kit with GKO installed with helm at Core Hub
# 2.3.2.1 in namespace gluesync-demo, the Core Hub simulator with a few hundred pipelines, and GKO; then an update to 2.3.2.2
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
# The demo fails (exit 1) unless the update to $1 ended Succeeded.
succeeded() {
  local result
  result=$(kubectl -n "$ns" get gsp gluesync -o jsonpath='{.status.lastAttempt.result}')
  if [ "$result" != Succeeded ]; then
    echo "demo: the update to $1 ended ${result:-without a result}, not Succeeded: $(kubectl -n "$ns" get gsp gluesync \
      -o jsonpath='{.status.lastAttempt.message}'); GKO's log: $logs/gluesync-operator.log" >&2
    exit 1
  fi
  echo "  the update to $1: Succeeded"
}

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

say "installing the Gluesync kit with GKO (charts/gluesync-kit, release gluesync) in namespace $ns, at Core Hub 2.3.2.1"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# A previous run's install goes first. Its GluesyncPlatform outlives the release (helm.sh/resource-policy:
# keep): it is deleted by hand, its finalizer too, since no GKO runs now to take it off.
# On a cluster that never had GKO there is neither: no GluesyncPlatform definition (so no `gsp` to ask
# about) and no release.
crd=customresourcedefinition/gluesyncplatforms.gluesync.molo17.com
helm -n "$ns" uninstall gluesync --wait >/dev/null 2>&1 || true
if kubectl get "$crd" >/dev/null 2>&1; then
  kubectl -n "$ns" patch gsp gluesync --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  kubectl -n "$ns" delete gsp gluesync --ignore-not-found --wait >/dev/null
fi
kubectl -n "$ns" create secret generic corehub-credentials --from-literal=username=admin \
  --from-literal=password=admin --dry-run=client -o yaml | kubectl -n "$ns" apply -f - >/dev/null
helm dependency build charts/gluesync-kit >/dev/null
# The release installs the GluesyncPlatform definition, unless the cluster has one that no release owns
# (the one the cluster tests install): then it is left as it is.
crds=()
if kubectl get "$crd" >/dev/null 2>&1 &&
  [ -z "$(kubectl get "$crd" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ]; then
  crds=(--set operator.crds.install=false)
fi
echo "\$ helm install gluesync charts/gluesync-kit --set gluesyncCoreHub.tag=2.3.2.1 ..."
helm -n "$ns" install gluesync charts/gluesync-kit \
  --set gluesyncCoreHub.tag=2.3.2.1 \
  --set operator.platform.coreHub.url=http://127.0.0.1:$sim_port \
  --set operator.platform.catalog.url=http://127.0.0.1:$sim_port \
  --set operator.platform.stabilityWindowSeconds=5 \
  --set operator.minReadySeconds=0 "${crds[@]}" >/dev/null
kubectl -n "$ns" get statefulsets,deployments -L com.molo17.conductor.type

# The local control plane runs no containers (its node is simulated), so GKO's pod never really starts:
# GKO runs here as a process, the way the chart's Deployment runs it: with the chart's ServiceAccount token
# alone, the Deployment's settings, and the Conductor API's certificate from the chart's Secret.
say "starting GKO with the chart's ServiceAccount and settings (log: $logs/gluesync-operator.log)"
gko=gluesync-gluesync-operator
run_dir=$logs/gko-demo
mkdir -p "$run_dir"
sed "s|^\(\s*token:\).*|\1 $(kubectl -n "$ns" create token $gko --duration=24h)|" "$KUBECONFIG" >"$run_dir/kubeconfig"
kubectl -n "$ns" get secret $gko-conductor-tls -o jsonpath='{.data.tls\.crt}' | base64 -d >"$run_dir/tls.crt"
kubectl -n "$ns" get secret $gko-conductor-tls -o jsonpath='{.data.tls\.key}' | base64 -d >"$run_dir/tls.key"
env_of() { kubectl -n "$ns" get deploy $gko -o jsonpath="{.spec.template.spec.containers[0].env[?(@.name=='$1')].value}"; }
KUBECONFIG="$run_dir/kubeconfig" POD_NAME=$gko-demo \
  GKO_ALLOWED_SECRETS=$(env_of GKO_ALLOWED_SECRETS) GKO_ALLOWED_COREHUB_URLS=$(env_of GKO_ALLOWED_COREHUB_URLS) \
  GKO_CONDUCTOR_TLS_CERT="$run_dir/tls.crt" GKO_CONDUCTOR_TLS_KEY="$run_dir/tls.key" \
  target/debug/gluesync-operator run --namespace "$ns" --metrics-addr 127.0.0.1:18080 \
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
succeeded 2.3.2.2
kubectl -n "$ns" get gsp gluesync -o jsonpath='{.status.lastAttempt.result}{": "}{.status.lastAttempt.message}{"\n"}{range .status.lastAttempt.results[*]}{"  "}{.name}{"\t"}{.status}{"\t"}{.from}{" -> "}{.to}{"\n"}{end}'
echo "  pipelines paused and resumed: $(kubectl -n "$ns" get gsp gluesync -o jsonpath='{.status.lastAttempt.resumedPipelines}' | tr ',' '\n' | grep -c .)"

say "history"
kubectl -n "$ns" get gsp gluesync \
  -o jsonpath='{range .status.history[*]}{.finishedAt}{"\t"}{.from}{" -> "}{.to}{"\t"}{.result}{"\t"}{.message}{"\n"}{end}'

say "events"
# This install's own: a previous run's GluesyncPlatform left its events in the namespace.
uid=$(kubectl -n "$ns" get gsp gluesync -o jsonpath='{.metadata.uid}')
kubectl -n "$ns" get events --field-selector "involvedObject.kind=GluesyncPlatform,involvedObject.uid=$uid" \
  --sort-by=.eventTime -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message 2>/dev/null \
  || kubectl -n "$ns" get events --field-selector "involvedObject.kind=GluesyncPlatform,involvedObject.uid=$uid"

say "Core Hub 2.3.2.3 is released; the Core Hub UI asks GKO to update all, through the Conductor API"
curl -sf -X PUT "http://127.0.0.1:$((sim_port + 1))/_sim/catalog/gluesync-core-hub" -H 'content-type: application/json' \
  -d '{"latestVersionGA":"2.3.2.3","latestVersionBeta":"2.3.2.3","latestVersionAlpha":"2.3.2.3"}'
kubectl -n "$ns" annotate gsp gluesync --overwrite gluesync.molo17.com/check-now="$(date +%s)" >/dev/null
kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.available}'=2.3.2.3 --timeout=30s >/dev/null
kubectl -n "$ns" get gsp
token=$(curl -sf -X POST "http://127.0.0.1:$sim_port/authentication/login" -H 'content-type: application/json' \
  -d '{"username":"manager","password":"manager"}' | sed -n 's/.*"apiToken":"\([^"]*\)".*/\1/p')
echo '$ curl -X POST .../conductor/api/containers -d {"action":"update","ids":[],"releaseChannel":"ga"}'
curl -s --cacert "$run_dir/tls.crt" --resolve "$gko.$ns.svc:$((sim_port + 2)):127.0.0.1" \
  -X POST "https://$gko.$ns.svc:$((sim_port + 2))/conductor/api/containers" -H "Authorization: Bearer $token" \
  -H 'content-type: application/json' -d '{"action":"update","ids":[],"releaseChannel":"ga"}'
echo
kubectl -n "$ns" wait gsp/gluesync --for=jsonpath='{.status.lastAttempt.target}'=2.3.2.3 --timeout=300s >/dev/null
kubectl -n "$ns" get gsp
succeeded 2.3.2.3

cat <<EOF

GKO runs on namespace $ns, with the simulator's Core Hub at http://127.0.0.1:$sim_port. In another terminal:
  eval "\$(hack/controlplane.sh env)"
  kubectl -n $ns get gsp -w
  kubectl -n $ns patch gsp gluesync --type merge -p '{"spec":{"version":"2.3.2.3-crash"}}'   # a failing update, rolled back
  kubectl -n $ns describe gsp gluesync
  curl -s 127.0.0.1:$((sim_port + 1))/_sim/state | head -c 300; curl -s 127.0.0.1:18080/metrics
  curl -sk https://127.0.0.1:$((sim_port + 2))/conductor/api/health   # the Conductor API the Core Hub UI calls
  helm -n $ns get values gluesync; helm -n $ns upgrade gluesync charts/gluesync-kit --reuse-values   # keeps GKO's versions
Stop with Ctrl-C; \`make cluster-down\` stops the control plane.
EOF

if [ "${DEMO_EXIT:-0}" = 1 ] || [ ! -t 0 ]; then
  exit 0
fi
wait
