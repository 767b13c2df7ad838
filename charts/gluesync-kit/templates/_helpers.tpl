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

{{/* One kit workload. Called with a dict: root, kind, component (core-hub, chronos...), type (the
com.molo17.conductor.type label), image, port. */}}
{{- define "kit.workload" -}}
{{- $name := printf "%s-gluesync-%s" .root.Release.Name .component -}}
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
          ports:
            - containerPort: {{ .port }}
{{- end -}}
