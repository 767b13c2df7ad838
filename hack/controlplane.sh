#!/usr/bin/env bash
# The local Kubernetes control plane that GKO's tests, benchmarks and demo run on.
#
#   hack/controlplane.sh build    build etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#                                 kubectl and kwok (hack/controlplane/go.mod) and helm into a cache outside
#                                 the repo, keyed by what they are built from; a warm cache returns at once;
#                                 then kstatus (below) the same way; kube-apiserver and helm again with
#                                 their versions stamped in, as release binaries are (each with a key of
#                                 its own, linked into the same folder)
#   hack/controlplane.sh up       start the cluster on loopback (or reuse the one running), one simulated node
#   hack/controlplane.sh down     stop it and remove its state
#   hack/controlplane.sh status   say whether it runs
#   hack/controlplane.sh restart kube-apiserver|kwok
#                                 kill that process of the running cluster and start it again (a fault the
#                                 random fault schedules inject), waiting until it serves again
#   hack/controlplane.sh env      print the exports that point kubectl, helm and the tests at it
#   hack/controlplane.sh bin      print the folder that holds the binaries
#   hack/controlplane.sh kstatus  print the path of the kstatus binary: hack/kstatus/go.mod, how Flux,
#                                 Helm 4's --wait and kpt read a resource (`kubectl get gsp/gluesync -o json
#                                 | kstatus`); its cache folder has a key of its own (hack/kstatus and the
#                                 Go version), so changing it never rebuilds the control plane; and
#                                 pullsim (hack/pullsim), the simulated node's image cache, the same way
#   hack/controlplane.sh promtool print the path of Prometheus' promtool (built from its Go module, a key of
#                                 its own), which tests the chart's alerting rules
#   hack/controlplane.sh monitoring-crds
#                                 print the folder of the Prometheus Operator's CRDs (its Go module)
#
# Settings (environment): GKO_CACHE_DIR (default ~/.cache/gluesync-operator) holds the binaries;
# GKO_CLUSTER_DIR (default /tmp/gko-cluster) holds the running cluster's certificates, data, logs and
# kubeconfig; GKO_CP_PORT_BASE (default 26400) is the first of the loopback ports it uses.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/controlplane"
cache_dir=${GKO_CACHE_DIR:-$HOME/.cache/gluesync-operator}
cluster_dir=${GKO_CLUSTER_DIR:-/tmp/gko-cluster}
port_base=${GKO_CP_PORT_BASE:-26400}
helm_version=v3.22.0

etcd_port=$((port_base + 1))
etcd_peer_port=$((port_base + 2))
api_port=$((port_base + 3))
kcm_port=$((port_base + 4))
sched_port=$((port_base + 5))
kwok_port=$((port_base + 6))

log() { printf '[controlplane] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cache_key() {
  { cat "$src/go.mod" "$src/go.sum" "$src"/cmd/*/*.go; echo "$helm_version"; go env GOVERSION; } | sha256sum | cut -c1-16
}

bin_dir() { echo "$cache_dir/controlplane/$(cache_key)/bin"; }

# kstatus has a key of its own, so changing it never rebuilds the control plane.
kstatus_src="$here/kstatus"
kstatus_key() {
  { cat "$kstatus_src/go.mod" "$kstatus_src/go.sum" "$kstatus_src"/*.go; go env GOVERSION; } | sha256sum | cut -c1-16
}

# The simulated node's image cache (hack/pullsim: an image whose tag ends in "-slow-pull" takes
# GKO_SLOW_PULL_SECONDS, default 20, to pull on a node that has not pulled it), with a key of its own too.
pullsim_src="$here/pullsim"
pullsim_key() {
  { cat "$pullsim_src/go.mod" "$pullsim_src/go.sum" "$pullsim_src"/*.go; go env GOVERSION; } | sha256sum | cut -c1-16
}
pullsim_bin() { echo "$cache_dir/pullsim/$(pullsim_key)/bin/pullsim"; }

# helm as its release binaries are built: with the Kubernetes version of its own modules (1.37 for helm
# v3.22) as the default of `helm template` and `helm lint` (without it, 1.20, and a chart's kubeVersion is
# checked against that). Its own key; the control plane's folder gets a link to it.
helm_k8s_minor=37
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done
# kube-apiserver with its version stamped in, as release binaries are (`go build` alone makes it report
# v0.0.0-master, which a chart's kubeVersion refuses): its own key, linked into the control plane's folder.
k8s_version=$(sed -n 's#^[[:space:]]*k8s.io/kubernetes v\([0-9.]*\).*#\1#p' "$src/go.mod" | head -1)
apiserver_ldflags="-s -w"
for kv in gitVersion=v$k8s_version gitMajor=${k8s_version%%.*} gitMinor=$(echo "$k8s_version" | cut -d. -f2) \
    gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
  apiserver_ldflags+=" -X k8s.io/component-base/version.$kv"
done
apiserver_key() { { cat "$src/go.mod" "$src/go.sum"; echo "$apiserver_ldflags"; go env GOVERSION; } | sha256sum | cut -c1-16; }
apiserver_bin() { echo "$cache_dir/kube-apiserver/$(apiserver_key)/bin/kube-apiserver"; }

helm_key() { { echo "$helm_version $helm_ldflags"; go env GOVERSION; } | sha256sum | cut -c1-16; }
helm_bin() { echo "$cache_dir/helm/$(helm_key)/bin/helm"; }

kstatus_bin() { echo "$cache_dir/kstatus/$(kstatus_key)/bin/kstatus"; }

# Prometheus' promtool (`promtool test rules`), for the tests of the chart's alerts: its own key.
promtool_version=v0.316.0
promtool_key() { { echo "promtool $promtool_version"; go env GOVERSION; } | sha256sum | cut -c1-16; }
promtool_bin() { echo "$cache_dir/promtool/$(promtool_key)/bin/promtool"; }

build() {
  local bin; bin=$(bin_dir)
  if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/helm" ]; then
    log "binaries cached in $bin"
    return
  fi
  command -v go >/dev/null || die "the Go toolchain is needed to build the control plane"
  local tmp="$bin.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  log "building the control plane into $bin (a cold build takes a while; later runs reuse it)"
  local start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/" \
      ./cmd/etcd \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl \
      sigs.k8s.io/kwok/cmd/kwok)
  # helm pins its own Kubernetes libraries, so it is built from its module on its own.
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags='-s -w' "helm.sh/helm/v3/cmd/helm@$helm_version"
  mkdir -p "$(dirname "$bin")"
  rm -rf "$bin"; mv "$tmp" "$bin"
  log "built in $((SECONDS - start)) s"
}

# Builds the binary `exe` into a folder of its own (named by its key) unless it is there: `label` for the
# log, then `command...` with the folder to build into as its last argument.
build_cached() { # exe label command...
  local exe=$1 label=$2; shift 2
  if [ -x "$exe" ]; then
    log "$label cached in $exe"
    return
  fi
  command -v go >/dev/null || die "the Go toolchain is needed to build $label"
  local bin; bin=$(dirname "$exe")
  local tmp="$bin.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  log "building $label into $bin"
  local start=$SECONDS
  "$@" "$tmp"
  rm -rf "$bin"; mv "$tmp" "$bin"
  log "$label built in $((SECONDS - start)) s"
}

# A small Go command of this repository (its own module): `go_command src name out`.
go_command() {
  (cd "$1" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$3/$2" .)
}

build_kstatus() { build_cached "$(kstatus_bin)" kstatus go_command "$kstatus_src" kstatus; }
build_pullsim() { build_cached "$(pullsim_bin)" pullsim go_command "$pullsim_src" pullsim; }
promtool_command() {
  GOBIN="$1" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags='-s -w' \
    "github.com/prometheus/prometheus/cmd/promtool@$promtool_version"
}
build_promtool() { build_cached "$(promtool_bin)" "promtool $promtool_version" promtool_command; }

# The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule...), from its Go module in the
# Go module cache, for the server-side dry runs of the chart's monitoring objects: prints their folder.
monitoring_crds_version=v0.85.0
monitoring_crds() {
  local dir
  dir=$(cd / && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$monitoring_crds_version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/example/prometheus-operator-crd" ] || die "no Prometheus Operator CRDs in ${dir:-the Go module cache}"
  echo "$dir/example/prometheus-operator-crd"
}

helm_command() {
  GOBIN="$1" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags="$helm_ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version"
}
apiserver_command() {
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags="$apiserver_ldflags" -o "$1/" k8s.io/kubernetes/cmd/kube-apiserver)
}

# helm and kube-apiserver with their versions stamped in, linked into the control plane's folder.
build_helm() {
  build_cached "$(helm_bin)" "helm $helm_version" helm_command
  ln -sfn "$(helm_bin)" "$(bin_dir)/helm"
}
build_apiserver() {
  build_cached "$(apiserver_bin)" "kube-apiserver v$k8s_version (version stamped)" apiserver_command
  ln -sfn "$(apiserver_bin)" "$(bin_dir)/kube-apiserver"
}

start_pullsim() {
  start_supervised pullsim "$(pullsim_bin)" --kubeconfig "$cluster_dir/kubeconfig"
}

kubeconfig_for() { # name token
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gko-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $cluster_dir/pki/ca.crt
users:
- name: $1
  user:
    token: $2
contexts:
- name: gko-local
  context:
    cluster: gko-local
    user: $1
    namespace: default
current-context: gko-local
EOF
}

pki() {
  local d="$cluster_dir/pki"
  mkdir -p "$d"
  [ -f "$d/apiserver.crt" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gko-local-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' > "$d/san.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/san.ext" -out "$d/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  local token; token=$(openssl rand -hex 24)
  printf '%s,admin,admin,system:masters\n' "$token" > "$d/tokens.csv"
  echo "$token" > "$d/admin.token"
}

start_proc() { # name args...
  local name=$1; shift
  nohup "$@" >"$cluster_dir/logs/$name.log" 2>&1 9>&- &
  echo $! > "$cluster_dir/pids/$name"
}

# Like start_proc, but started again whenever it exits, as a kubelet restarts a control-plane pod:
# kube-scheduler exits by design when it finds its cache inconsistent (which a restart of kube-apiserver or
# kwok can cause). Its own session, so that stopping it stops the loop and the process together.
start_supervised() { # name args...
  local name=$1; shift
  nohup setsid bash -c 'while :; do "$@"; echo "[controlplane] exited ($?); starting again" >&2; sleep 1; done' \
    "$name" "$@" >"$cluster_dir/logs/$name.log" 2>&1 9>&- &
  echo $! > "$cluster_dir/pids/$name"
}

# A recorded process that still runs, and is still ours (a pid may have been reused since).
alive() {
  local pid
  [ -f "$cluster_dir/pids/$1" ] || return 1
  pid=$(cat "$cluster_dir/pids/$1")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "/$1 "
}

running() {
  local p
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do alive "$p" || return 1; done
  "$(bin_dir)/kubectl" --kubeconfig "$cluster_dir/kubeconfig" get --raw /readyz >/dev/null 2>&1
}

wait_for() { # description seconds command...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { log "timed out waiting for $what; logs in $cluster_dir/logs"; tail -n 20 "$cluster_dir"/logs/*.log >&2 || true; return 1; }
    sleep 0.2
  done
}

wait_apiserver() {
  wait_for "kube-apiserver" 60 "$(bin_dir)/kubectl" --kubeconfig "$cluster_dir/kubeconfig" get --raw /readyz
}

start_apiserver() {
  local bin; bin=$(bin_dir)
  start_proc kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$cluster_dir/pki/apiserver.crt" --tls-private-key-file "$cluster_dir/pki/apiserver.key" \
    --client-ca-file "$cluster_dir/pki/ca.crt" \
    --token-auth-file "$cluster_dir/pki/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$cluster_dir/pki/sa.pub" \
    --service-account-signing-key-file "$cluster_dir/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode RBAC \
    --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
    --enable-priority-and-fairness=false \
    --event-ttl 1h \
    --v 0
}

start_kwok() {
  local bin; bin=$(bin_dir)
  start_proc kwok "$bin/kwok" --kubeconfig "$cluster_dir/kubeconfig" --config "$src/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 10.244.0.1/16 --node-ip 10.0.0.1 --node-lease-duration-seconds 10 \
    --server-address "127.0.0.1:$kwok_port"
}

# Kills one process of the control plane (SIGKILL, as a crash or a lost node would) and starts it again:
# `restart kube-apiserver` waits until it serves again, `restart kwok` until it answers its health check.
# (A graceful stop of kube-apiserver waits up to a minute for open watches; a crash is the harder fault.)
restart() {
  local p=$1 pid
  case "$p" in kube-apiserver|kwok) ;; *) echo "restart: kube-apiserver or kwok" >&2; return 2 ;; esac
  [ -f "$cluster_dir/pids/$p" ] || { log "no cluster runs"; return 1; }
  pid=$(cat "$cluster_dir/pids/$p")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if [ "$p" = kube-apiserver ]; then
    start_apiserver
    wait_apiserver
  else
    start_kwok
    wait_for "kwok" 30 curl -sf "http://127.0.0.1:$kwok_port/healthz"
  fi
  log "$p restarted"
}

up() {
  build
  build_apiserver
  build_helm
  build_pullsim
  mkdir -p "$cluster_dir"
  exec 9>"$cluster_dir/.lock"
  flock 9
  if running; then
    alive pullsim || start_pullsim
    log "cluster already running (KUBECONFIG=$cluster_dir/kubeconfig)"
    return
  fi
  stop_all
  local bin; bin=$(bin_dir)
  local start=$SECONDS
  rm -rf "$cluster_dir/etcd" "$cluster_dir/logs" "$cluster_dir/pids"
  mkdir -p "$cluster_dir/logs" "$cluster_dir/pids"
  pki
  local token; token=$(cat "$cluster_dir/pki/admin.token")
  kubeconfig_for admin "$token" > "$cluster_dir/kubeconfig"

  start_proc etcd "$bin/etcd" --name gko --data-dir "$cluster_dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "gko=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync --quota-backend-bytes 4294967296 \
    --log-level warn

  start_apiserver

  wait_for "etcd" 30 curl -sf "http://127.0.0.1:$etcd_port/health"
  wait_apiserver

  start_supervised kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$cluster_dir/kubeconfig" --authentication-kubeconfig "$cluster_dir/kubeconfig" \
    --authorization-kubeconfig "$cluster_dir/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --controllers '*,-nodelifecycle,-nodeipam' \
    --service-account-private-key-file "$cluster_dir/pki/sa.key" --root-ca-file "$cluster_dir/pki/ca.crt" \
    --concurrent-statefulset-syncs 10 --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10 \
    --kube-api-qps 200 --kube-api-burst 400 --v 0

  start_supervised kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$cluster_dir/kubeconfig" --authentication-kubeconfig "$cluster_dir/kubeconfig" \
    --authorization-kubeconfig "$cluster_dir/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false \
    --kube-api-qps 200 --kube-api-burst 400 --v 0

  start_kwok

  "$bin/kubectl" --kubeconfig "$cluster_dir/kubeconfig" apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-0
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
EOF
  start_pullsim
  wait_for "the simulated node to be Ready" 60 "$bin/kubectl" --kubeconfig "$cluster_dir/kubeconfig" \
    wait --for=condition=Ready node/kwok-node-0 --timeout=1s
  log "cluster up in $((SECONDS - start)) s: export KUBECONFIG=$cluster_dir/kubeconfig"
}

stop_all() {
  local p pid
  [ -d "$cluster_dir/pids" ] || return 0
  for p in pullsim kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if alive "$p"; then
      pid=$(cat "$cluster_dir/pids/$p")
      # A supervised process leads its own group: the loop and the process go together.
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$cluster_dir/pids/$p"
  done
}

down() {
  [ -d "$cluster_dir" ] || return 0
  stop_all
  rm -rf "$cluster_dir/etcd" "$cluster_dir/pids"
  log "cluster stopped"
}

case "${1:-}" in
  build) build; build_apiserver; build_helm; build_kstatus; build_pullsim; build_promtool; monitoring_crds >/dev/null ;;
  up) up ;;
  down) down ;;
  restart) restart "${2:-}" ;;
  status) if running; then echo "running: KUBECONFIG=$cluster_dir/kubeconfig"; else echo "not running"; exit 1; fi ;;
  env) printf 'export KUBECONFIG=%q\nexport PATH=%q:"$PATH"\n' "$cluster_dir/kubeconfig" "$(bin_dir)" ;;
  bin) bin_dir ;;
  kstatus) kstatus_bin ;;
  promtool) promtool_bin ;;
  monitoring-crds) monitoring_crds ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
