{{/*
The image of a workload's container: the one that runs when the workload exists (GKO owns the images once
installed, under both update policies, so that a version change reaches Core Hub through GKO, with
maintenance mode and the stability check), else the values'. Called with a dict: root, kind, name,
container, image.
*/}}
{{- define "kit.image" -}}
{{- $image := .image -}}
{{- $container := .container -}}
{{- if .root.Capabilities.APIVersions.Has (printf "apps/v1/%s" .kind) -}}
{{- $live := (lookup "apps/v1" .kind .root.Release.Namespace .name) | default dict -}}
{{- range (dig "spec" "template" "spec" "containers" (list) $live) -}}
{{- if eq .name $container -}}
{{- $image = .image -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $image -}}
{{- end -}}

{{/*
Disaster recovery set up by hand (disasterRecovery.enabled): the names GKO's setup from the Core Hub UI uses
too, so that Core Hub and Chronos read the same settings either way. Only GKO writes the pod-template
annotation gluesync.molo17.com/disaster-recovery, which marks its own setups.
*/}}
{{- define "kit.dr.name" -}}
{{- printf "%s-gluesync-disaster-recovery" .Release.Name -}}
{{- end -}}

{{/* The Secret the workloads mount: disasterRecovery.existingSecret, else the one the kit renders. */}}
{{- define "kit.dr.secret" -}}
{{- default (include "kit.dr.name" .) .Values.disasterRecovery.existingSecret -}}
{{- end -}}

{{/* The environment, ports, mount and volume of a by-hand setup, for the managed container and its pod.
Called with the chart's top scope; each renders a list's items. */}}
{{- define "kit.dr.env" -}}
{{- $d := .Values.disasterRecovery -}}
- name: GLUESYNC_DR_ENABLED
  value: "true"
- name: GLUESYNC_DR_ROLE
  value: {{ $d.role | quote }}
- name: GLUESYNC_DR_PEER_ADDRESS
  value: {{ $d.peerAddress | quote }}
- name: GLUESYNC_DR_REPLICATION_PORT
  value: {{ $d.replicationPort | int | quote }}
- name: GLUESYNC_DR_CONTROL_PORT
  value: {{ $d.controlPort | int | quote }}
- name: GLUESYNC_DR_SECRET_FILE
  value: /opt/gluesync/disaster-recovery/sharedSecret
{{- end -}}

{{- define "kit.dr.ports" -}}
- name: dr-replication
  containerPort: {{ .Values.disasterRecovery.replicationPort | int }}
  protocol: TCP
- name: dr-control
  containerPort: {{ .Values.disasterRecovery.controlPort | int }}
  protocol: TCP
{{- end -}}

{{- define "kit.dr.mounts" -}}
- name: gluesync-disaster-recovery
  mountPath: /opt/gluesync/disaster-recovery
  readOnly: true
{{- end -}}

{{- define "kit.dr.volumes" -}}
- name: gluesync-disaster-recovery
  secret:
    secretName: {{ include "kit.dr.secret" . }}
    defaultMode: 256 # 0400
{{- end -}}

{{/* One kit workload. Called with a dict: root, kind, component (core-hub, chronos...), type (the
com.molo17.conductor.type label), image, port, and dr (true: it takes the by-hand disaster-recovery
setup, when disasterRecovery.enabled). */}}
{{- define "kit.workload" -}}
{{- $name := printf "%s-gluesync-%s" .root.Release.Name .component -}}
{{- $dr := and .dr .root.Values.disasterRecovery.enabled -}}
apiVersion: apps/v1
kind: {{ .kind }}
metadata:
  name: {{ $name }}
  labels:
    app.kubernetes.io/name: {{ $name }}
    app.kubernetes.io/instance: {{ .root.Release.Name }}
    app.kubernetes.io/managed-by: {{ .root.Release.Service }}
    com.molo17.conductor.type: {{ .type }}
spec:
  replicas: 1
  {{- if eq .kind "StatefulSet" }}
  serviceName: {{ $name }}
  {{- end }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ $name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {{ $name }}
        app.kubernetes.io/instance: {{ .root.Release.Name }}
    spec:
      containers:
        - name: {{ .component }}
          image: {{ include "kit.image" (dict "root" .root "kind" .kind "name" $name "container" .component "image" .image) | quote }}
          {{- if $dr }}
          env:
            {{- include "kit.dr.env" .root | nindent 12 }}
          {{- end }}
          ports:
            - containerPort: {{ .port }}
            {{- if $dr }}
            {{- include "kit.dr.ports" .root | nindent 12 }}
            {{- end }}
          {{- if $dr }}
          volumeMounts:
            {{- include "kit.dr.mounts" .root | nindent 12 }}
          {{- end }}
      {{- if $dr }}
      volumes:
        {{- include "kit.dr.volumes" .root | nindent 8 }}
      {{- end }}
{{- end -}}
