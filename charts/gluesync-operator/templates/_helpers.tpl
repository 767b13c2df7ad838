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
A GluesyncPlatform named gluesync. Called with a dict: root (the chart's top scope), platform (the platform
values), policy, selfUpdate. Under updatePolicy ui the live spec.version and spec.modules win (the Core Hub UI
moved them); under gitops the values win. spec.requestID keeps its live value under both. Used by this chart
and by the Gluesync kit.
*/}}
{{- define "gluesync-operator.platform" -}}
{{- $root := .root -}}
{{- $p := .platform -}}
{{- $live := dict -}}
{{- if $root.Capabilities.APIVersions.Has "gluesync.molo17.com/v1alpha1/GluesyncPlatform" -}}
{{- $live = (lookup "gluesync.molo17.com/v1alpha1" "GluesyncPlatform" $root.Release.Namespace "gluesync") | default dict -}}
{{- end -}}
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
{{- end -}}
