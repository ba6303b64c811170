{{- define "imesh.labels" -}}
app.kubernetes.io/name: imesh
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "imesh.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/* Pod annotations for Prometheus servers that discover scrape targets by annotation. */}}
{{- define "imesh.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
prometheus.io/scheme: {{ .scheme | lower }}
{{- end }}

{{- define "imesh.secretName" -}}
{{- default (printf "%s-imesh" .Release.Name) .Values.existingSecret }}
{{- end }}

{{/* Redis's URL, for the services and their migrations (the gateway has no setting for it). */}}
{{- define "imesh.redisEnv" -}}
{{- with .Values.redis.url -}}
- name: IMESH__REDIS__URL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The in-cluster address of a service: its headless Service and gRPC port. */}}
{{- define "imesh.addr" -}}
{{- $svc := index .root.Values.services .name -}}
{{ printf "%s-%s:%v" .root.Release.Name .name $svc.port }}
{{- end }}

{{- define "imesh.commonEnv" -}}
- name: IMESH__AUTH__INTERNAL_SECRET
  valueFrom: { secretKeyRef: { name: {{ include "imesh.secretName" . }}, key: internal-secret } }
- name: IMESH__AUTH__JWT_SECRET
  valueFrom: { secretKeyRef: { name: {{ include "imesh.secretName" . }}, key: jwt-secret } }
- name: IMESH__AUTH__JWT_VERIFY_SECRETS
  valueFrom: { secretKeyRef: { name: {{ include "imesh.secretName" . }}, key: jwt-verify-secrets, optional: true } }
{{- with .Values.auth.jwtPublicKeys }}
- name: IMESH__AUTH__JWT_PUBLIC_KEYS
  value: {{ join "," . | quote }}
{{- end }}
- name: IMESH__TELEMETRY__LOG
  value: {{ .Values.telemetry.log | quote }}
- name: IMESH__TELEMETRY__JSON
  value: {{ .Values.telemetry.json | quote }}
{{- with .Values.telemetry.otlpEndpoint }}
- name: IMESH__TELEMETRY__OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.internalTls.secretName }}
- name: IMESH__GRPC__TLS__CERT_FILE
  value: /etc/imesh/internal-tls/tls.crt
- name: IMESH__GRPC__TLS__KEY_FILE
  value: /etc/imesh/internal-tls/tls.key
- name: IMESH__GRPC__TLS__CA_FILE
  value: /etc/imesh/internal-tls/ca.crt
- name: IMESH__GRPC__TLS__SERVER_NAME
  value: {{ .Values.internalTls.serverName | quote }}
{{- end }}
{{- end }}

{{/* The most processes a service may run at once: its replicas, or the HPA's maximum. */}}
{{- define "imesh.maxReplicas" -}}
{{- if .root.Values.autoscaling.enabled }}{{ max (int .svc.replicas) (int .root.Values.autoscaling.maxReplicas) }}{{ else }}{{ .svc.replicas }}{{ end }}
{{- end }}

{{/* HTTP or HTTPS: how probes and scrapers reach the gRPC port. */}}
{{- define "imesh.grpcScheme" -}}
{{- if .Values.internalTls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Alive while the process serves; ready while its stores answer (or, for a gateway,
     while it has room for clients). Plain HTTP/1 on the gRPC port, TLS when it is on. */}}
{{- define "imesh.probes" -}}
readinessProbe:
  httpGet: { path: /readyz, port: grpc, scheme: {{ include "imesh.grpcScheme" . }} }
  periodSeconds: 5
livenessProbe:
  httpGet: { path: /livez, port: grpc, scheme: {{ include "imesh.grpcScheme" . }} }
  initialDelaySeconds: 10
  periodSeconds: 10
{{- end }}

{{/*
message-svc's file store: the S3 bucket of .Values.files, or off when none is set (the
embedded default's local folder is for one process only).
*/}}
{{- define "imesh.filesEnv" -}}
{{- $s3 := .Values.files.s3 -}}
{{- if $s3.bucket }}
- name: IMESH__FILES__STORE
  value: s3
- name: IMESH__FILES__S3__ENDPOINT
  value: {{ required "files.s3.endpoint is required with files.s3.bucket" $s3.endpoint | quote }}
- name: IMESH__FILES__S3__BUCKET
  value: {{ $s3.bucket | quote }}
- name: IMESH__FILES__S3__REGION
  value: {{ $s3.region | quote }}
- name: IMESH__FILES__S3__VIRTUAL_HOST
  value: {{ $s3.virtualHost | quote }}
- name: IMESH__FILES__S3__ACCESS_KEY
  valueFrom: { secretKeyRef: { name: {{ include "imesh.secretName" . }}, key: s3-access-key } }
- name: IMESH__FILES__S3__SECRET_KEY
  valueFrom: { secretKeyRef: { name: {{ include "imesh.secretName" . }}, key: s3-secret-key } }
{{- else }}
- name: IMESH__FILES__STORE
  value: "off"
{{- end }}
{{- end }}
