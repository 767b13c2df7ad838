{{/* The release's name for GKO's objects: gluesync-operator for its own chart, <release>-gluesync-operator in the kit. */}}
{{- define "gluesync-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gluesync-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gluesync-operator.labels" -}}
{{ include "gluesync-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with (.Values.global | default dict).commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* GKO's ServiceAccount: serviceAccount.name, else the release's full name. */}}
{{- define "gluesync-operator.serviceAccountName" -}}
{{- default (include "gluesync-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The pull secrets of GKO's pod: imagePullSecrets and global.imagePullSecrets. */}}
{{- define "gluesync-operator.pullSecrets" -}}
{{- concat (.Values.imagePullSecrets | default list) ((.Values.global | default dict).imagePullSecrets | default list) | uniq | toJson -}}
{{- end -}}

{{/* The update policy: updatePolicy (kit name) or platform.updatePolicy. */}}
{{- define "gluesync-operator.policy" -}}
{{- default .Values.platform.updatePolicy .Values.updatePolicy -}}
{{- end -}}

{{/*
GKO's image. The chart's tag (tag, image.tag, else appVersion), except under updatePolicy ui with self-update
on: a newer image GKO put on its own Deployment is kept, so that helm upgrade never downgrades GKO.
*/}}
{{- define "gluesync-operator.image" -}}
{{- $tag := default .Chart.AppVersion (default .Values.image.tag .Values.tag) -}}
{{- $repository := .Values.image.repository -}}
{{- with (.Values.global | default dict).imageRegistry -}}
{{- /* The registry part is the first path segment when it names a host (a dot, a colon or localhost). */ -}}
{{- $first := first (splitList "/" $repository) -}}
{{- if and (gt (len (splitList "/" $repository)) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repository = printf "%s/%s" . (join "/" (rest (splitList "/" $repository))) -}}
{{- else -}}
{{- $repository = printf "%s/%s" . $repository -}}
{{- end -}}
{{- end -}}
{{- $image := printf "%s:%s" $repository $tag -}}
{{- if .Values.image.digest -}}
{{- $image = printf "%s@%s" $repository .Values.image.digest -}}
{{- else if and (eq (include "gluesync-operator.policy" .) "ui") .Values.selfUpdate.enabled (.Capabilities.APIVersions.Has "apps/v1/Deployment") -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "gluesync-operator.fullname" .) -}}
{{- range (dig "spec" "template" "spec" "containers" (list) $live) -}}
{{- if eq .name "gluesync-operator" -}}
{{- /* Versions compared by their numbers only (x.y.z, a suffix such as -ubi ignored). */ -}}
{{- $liveVersion := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" (regexReplaceAll "^.*:" (toString .image) "") -}}
{{- $chartVersion := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" $tag -}}
{{- if and $liveVersion $chartVersion (semverCompare (printf ">%s" $chartVersion) $liveVersion) -}}
{{- $image = .image -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $image -}}
{{- end -}}

{{/*
Disaster recovery: the name of the Secret a setup from the Core Hub UI writes and of the Service GKO makes,
<platform>-disaster-recovery for the GluesyncPlatform gluesync.
*/}}
{{- define "gluesync-operator.drName" -}}
gluesync-disaster-recovery
{{- end -}}

{{/*
The Secrets GKO may read, as a JSON list: the Core Hub credentials and CA, and with disasterRecovery.enabled
the pair's Secret (the Core Hub UI's, and platform.disasterRecovery.secretName when set). The same list goes
into GKO_ALLOWED_SECRETS and the Role. Fails when platform.disasterRecovery is set without
disasterRecovery.enabled: GKO could not read the pair's Secret.
*/}}
{{- define "gluesync-operator.allowedSecrets" -}}
{{- $p := .Values.platform -}}
{{- $dr := $p.disasterRecovery | default dict -}}
{{- $names := list $p.coreHub.credentialsSecret $p.coreHub.caSecret -}}
{{- if .Values.disasterRecovery.enabled -}}
{{- $names = concat $names (list (include "gluesync-operator.drName" .) (get $dr "secretName")) -}}
{{- else if $dr -}}
{{- fail "platform.disasterRecovery needs disasterRecovery.enabled: true (GKO may not read the pair's Secret otherwise)" -}}
{{- end -}}
{{- compact $names | uniq | toJson -}}
{{- end -}}

{{/* The Conductor API's TLS Secret. */}}
{{- define "gluesync-operator.tlsSecret" -}}
{{- default (printf "%s-conductor-tls" (include "gluesync-operator.fullname" .)) .Values.conductor.tls.secretName -}}
{{- end -}}

{{/*
What this release does with the GluesyncPlatform definition (CRD) when crds.install is true, from the live
one (lookup; none under helm template and Argo CD, which render it): "render" when there is none or this
release owns it, "other:<namespace>/<release>" when another release owns it (the CRD is cluster-wide: one
release of GKO's chart owns it, the others leave it), "unowned" when no release does (an earlier chart
installed it from its crds/ folder, or it was applied with kubectl).
*/}}
{{- define "gluesync-operator.crdState" -}}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "gluesyncplatforms.gluesync.molo17.com" | default dict -}}
{{- $owner := dig "metadata" "annotations" "meta.helm.sh/release-name" "" $crd -}}
{{- $ownerNs := dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $crd -}}
{{- if or (not $crd) (and (eq $owner .Release.Name) (eq $ownerNs .Release.Namespace)) -}}render
{{- else if $owner -}}other:{{ $ownerNs }}/{{ $owner }}
{{- else -}}unowned
{{- end -}}
{{- end -}}

{{/*
"true" when this helm upgrade is the one that makes a GluesyncPlatform created by an install's hook (see
gluesync-operator.platform) part of the release: the hook's revision is still the deployed one. Helm 3
adopts an object that is new to the release with an empty patch (it diffs the rendered object against
itself), so such an upgrade renders the platform as it runs and the values apply from the next upgrade.
Called with the chart's top scope and the live platform.
*/}}
{{- define "gluesync-operator.platformAdoption" -}}
{{- $revision := dig "metadata" "annotations" "gluesync.molo17.com/helm-hook-revision" "" .live -}}
{{- if and $revision .root.Release.IsUpgrade -}}
{{- $record := printf "sh.helm.release.v1.%s.v%s" .root.Release.Name $revision -}}
{{- $stored := lookup "v1" "Secret" .root.Release.Namespace $record | default (lookup "v1" "ConfigMap" .root.Release.Namespace $record) | default dict -}}
{{- if eq (dig "metadata" "labels" "status" "" $stored) "deployed" -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* The live GluesyncPlatform gluesync (empty when there is none, or no API to ask). */}}
{{- define "gluesync-operator.livePlatform" -}}
{{- if .Capabilities.APIVersions.Has "gluesync.molo17.com/v1alpha1/GluesyncPlatform" -}}
{{- (lookup "gluesync.molo17.com/v1alpha1" "GluesyncPlatform" .Release.Namespace "gluesync") | default dict | toJson -}}
{{- else -}}{}{{- end -}}
{{- end -}}

{{/*
What helm install and upgrade print about the definition and the platform: who owns the definition, and
whether this upgrade adopted a platform it then left as it runs. Called with the chart's top scope and
crds (the crds values of GKO's chart).
*/}}
{{- define "gluesync-operator.crdNotes" -}}
{{- if .crds.install -}}
{{- $state := include "gluesync-operator.crdState" .root -}}
{{- if hasPrefix "other:" $state }}

The GluesyncPlatform definition belongs to release {{ trimPrefix "other:" $state }} (namespace/release): this
release leaves it as it is. Upgrade that release first when a new chart changes the definition.
{{- end -}}
{{- end -}}
{{- $live := include "gluesync-operator.livePlatform" .root | fromJson -}}
{{- if include "gluesync-operator.platformAdoption" (dict "root" .root "live" $live) }}

This upgrade made the GluesyncPlatform gluesync, which the install created, part of release {{ .root.Release.Name }}
as it runs now (Helm 3 applies nothing to an object a release adopts). The values' changes to it take effect
at the next upgrade: run the same helm upgrade again.
{{- end -}}
{{- end -}}

{{/*
A GluesyncPlatform named gluesync. Called with a dict: root (the chart's top scope), platform (the platform
values), policy, selfUpdate, crds (the crds values of GKO's chart). Under updatePolicy ui the live
spec.version and spec.modules win (the Core Hub UI moved them); under gitops the values win. spec.requestID
keeps its live value under both. Used by this chart and by the Gluesync kit.

When the release installs the definition too and the API server does not serve it yet (a first install),
Helm could not map the platform to a resource: the platform is then a post-install hook, created once the
definition is. The hook records its revision, so that the upgrade that adopts it can tell itself apart
(gluesync-operator.platformAdoption) and render the platform as it runs.
*/}}
{{- define "gluesync-operator.platform" -}}
{{- $root := .root -}}
{{- $p := .platform -}}
{{- $served := $root.Capabilities.APIVersions.Has "gluesync.molo17.com/v1alpha1/GluesyncPlatform" -}}
{{- $live := include "gluesync-operator.livePlatform" $root | fromJson -}}
{{- $hook := and (not $served) .crds.install -}}
{{- $adoption := include "gluesync-operator.platformAdoption" (dict "root" $root "live" $live) -}}
{{- $version := $p.version -}}
{{- $modules := $p.modules | default dict -}}
{{- if eq .policy "ui" -}}
{{- $version = dig "spec" "version" $version $live -}}
{{- $modules = dig "spec" "modules" $modules $live -}}
{{- end -}}
{{- /* requestID: the live value under both policies (the Core Hub UI's last request, or a retry with
kubectl); the value seeds the first install only. A value winning under gitops would write an old request
back on every upgrade after a kubectl retry, which counts as a new request. */ -}}
{{- $requestID := dig "spec" "requestID" $p.requestID $live -}}
{{- /* disasterRecovery: under ui the live value once the platform exists (the Core Hub UI sets the pair up and
takes it down; the values seed the first install), under gitops the values. */ -}}
{{- $dr := $p.disasterRecovery | default dict -}}
{{- if $dr -}}
{{- /* With the defaults the API server would fill in, so that what is rendered is what runs (Argo CD's diff). */ -}}
{{- $service := merge (deepCopy ($dr.service | default dict)) (dict "type" "LoadBalancer") -}}
{{- $dr = merge (dict "service" $service) (deepCopy $dr) (dict "replicationPort" 1718 "controlPort" 1719) -}}
{{- end -}}
{{- if and (eq .policy "ui") $live -}}
{{- $dr = dig "spec" "disasterRecovery" (dict) $live -}}
{{- end -}}
{{- if not $version -}}
{{- fail "platform.version (the kit: gluesyncCoreHub.tag) is required: the Core Hub version of the first install, for example 2.3.2.2" -}}
{{- end -}}
apiVersion: gluesync.molo17.com/v1alpha1
kind: GluesyncPlatform
metadata:
  name: gluesync
  namespace: {{ $root.Release.Namespace }}
  labels:
    app.kubernetes.io/instance: {{ $root.Release.Name }}
    app.kubernetes.io/managed-by: {{ $root.Release.Service }}
  annotations:
    # The record of the install outlives the release: delete it with kubectl when the install goes.
    helm.sh/resource-policy: keep
    # Argo CD: after GKO's Deployment (wave 0), and with its definition in the same sync.
    argocd.argoproj.io/sync-wave: "1"
    argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true
    {{- if $hook }}
    helm.sh/hook: post-install,post-upgrade
    # Not before-hook-creation: Helm would build the object to delete with the discovery it read before the
    # definition existed, and fail.
    helm.sh/hook-delete-policy: hook-failed
    # The owner Helm checks when the next upgrade adopts the platform.
    meta.helm.sh/release-name: {{ $root.Release.Name }}
    meta.helm.sh/release-namespace: {{ $root.Release.Namespace }}
    {{- end }}
    {{- if or $hook $adoption }}
    gluesync.molo17.com/helm-hook-revision: {{ dig "metadata" "annotations" "gluesync.molo17.com/helm-hook-revision" (toString $root.Release.Revision) $live | quote }}
    {{- end }}
{{- if $adoption }}
spec:
  {{- toYaml $live.spec | nindent 2 }}
{{- else }}
spec:
  version: {{ $version | quote }}
  {{- with $modules }}
  modules:
    {{- range $name, $v := . }}
    {{ $name }}: {{ $v | quote }}
    {{- end }}
  {{- end }}
  {{- with $requestID }}
  requestID: {{ . | quote }}
  {{- end }}
  updatePolicy: {{ .policy }}
  releaseChannel: {{ $p.releaseChannel }}
  checkIntervalMinutes: {{ $p.checkIntervalMinutes }}
  {{- with $p.imageRegistry }}
  imageRegistry: {{ . | quote }}
  {{- end }}
  catalog:
    offline: {{ $p.catalog.offline }}
    {{- with $p.catalog.url }}
    url: {{ . | quote }}
    {{- end }}
  coreHub:
    {{- with $p.coreHub.url }}
    url: {{ . | quote }}
    {{- end }}
    {{- with $p.coreHub.credentialsSecret }}
    credentialsSecret: {{ . | quote }}
    {{- end }}
    {{- with $p.coreHub.caSecret }}
    caSecret: {{ . | quote }}
    {{- end }}
    insecureSkipVerify: {{ $p.coreHub.insecureSkipVerify }}
  drainTimeoutSeconds: {{ $p.drainTimeoutSeconds }}
  stabilityWindowSeconds: {{ $p.stabilityWindowSeconds }}
  stabilityTimeoutSeconds: {{ $p.stabilityTimeoutSeconds }}
  {{- with $p.maintenanceWindows }}
  maintenanceWindows:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  approval: {{ $p.approval | default "automatic" }}
  approvalTimeoutMinutes: {{ $p.approvalTimeoutMinutes | default 1440 }}
  {{- $pull := $p.prePull | default dict }}
  prePull:
    enabled: {{ if hasKey $pull "enabled" }}{{ $pull.enabled }}{{ else }}true{{ end }}
    timeoutSeconds: {{ $pull.timeoutSeconds | default 300 }}
  selfUpdate:
    enabled: {{ .selfUpdate }}
  {{- with $dr }}
  disasterRecovery:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
A Prometheus duration of the chart's schema (one or more of <n>ms, <n>s, <n>m, <n>h: 1m30s) in milliseconds.
*/}}
{{- define "gluesync-operator.durationMs" -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 -}}
{{- $n := regexFind "^[0-9]+" . | int64 -}}
{{- $unit := trimPrefix (regexFind "^[0-9]+" .) . -}}
{{- $ms = add $ms (mul $n (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit)) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{/*
The scrape timeout of a ServiceMonitor or PodMonitor (dict "what" <values path> "m" <its values>): the one
set, refused when longer than the interval (the Prometheus Operator drops such a monitor and GKO goes
unscraped), or by default 30s, or the interval when that is shorter.
*/}}
{{- define "gluesync-operator.scrapeTimeout" -}}
{{- $interval := include "gluesync-operator.durationMs" .m.interval | int64 -}}
{{- if .m.scrapeTimeout -}}
{{- if gt (include "gluesync-operator.durationMs" .m.scrapeTimeout | int64) $interval -}}
{{- fail (printf "%s.scrapeTimeout (%s) is longer than %s.interval (%s): the Prometheus Operator refuses such a monitor; set it to at most the interval, or leave it unset" .what .m.scrapeTimeout .what .m.interval) -}}
{{- end -}}
{{- .m.scrapeTimeout -}}
{{- else if lt $interval 30000 -}}
{{- .m.interval -}}
{{- else -}}
30s
{{- end -}}
{{- end -}}
