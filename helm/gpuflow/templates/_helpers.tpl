{{/* Names, labels and the values every component shares. */}}

{{- define "gpuflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: <release>-gpuflow, or the release name if it has it. */}}
{{- define "gpuflow.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* <fullname>-<component>, e.g. gpuflow-operator. Call with (list $ "operator"). */}}
{{- define "gpuflow.componentName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "gpuflow.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuflow.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpuflow.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Labels of every object. Call with (list $ "component"). */}}
{{- define "gpuflow.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{ include "gpuflow.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: gpuflow
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpuflow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret the chart writes: database and broker URLs, bundled passwords. */}}
{{- define "gpuflow.secretName" -}}
{{- include "gpuflow.componentName" (list . "connections") }}
{{- end }}

{{- define "gpuflow.configName" -}}
{{- include "gpuflow.componentName" (list . "config") }}
{{- end }}

{{- define "gpuflow.postgresqlHost" -}}
{{- printf "%s.%s.svc" (include "gpuflow.componentName" (list . "postgresql")) .Release.Namespace }}
{{- end }}

{{- define "gpuflow.redisHost" -}}
{{- printf "%s.%s.svc" (include "gpuflow.componentName" (list . "redis")) .Release.Namespace }}
{{- end }}

{{/* Where GPUFLOW_DATABASE_URL comes from: {name, key} of a Secret. */}}
{{- define "gpuflow.databaseSecretRef" -}}
{{- if and (not .Values.postgresql.enabled) .Values.externalDatabase.existingSecret }}
name: {{ .Values.externalDatabase.existingSecret }}
key: {{ .Values.externalDatabase.existingSecretKey }}
{{- else }}
name: {{ include "gpuflow.secretName" . }}
key: database-url
{{- end }}
{{- end }}

{{- define "gpuflow.brokerSecretRef" -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.existingSecret }}
name: {{ .Values.externalRedis.existingSecret }}
key: {{ .Values.externalRedis.existingSecretKey }}
{{- else }}
name: {{ include "gpuflow.secretName" . }}
key: broker-url
{{- end }}
{{- end }}

{{/* The service's settings: the ConfigMap's GPUFLOW_* plus the two URLs from Secrets. */}}
{{- define "gpuflow.serviceEnv" -}}
envFrom:
  - configMapRef:
      name: {{ include "gpuflow.configName" . }}
env:
  - name: GPUFLOW_DATABASE_URL
    valueFrom:
      secretKeyRef:
        {{- include "gpuflow.databaseSecretRef" . | trim | nindent 8 }}
  - name: GPUFLOW_BROKER_URL
    valueFrom:
      secretKeyRef:
        {{- include "gpuflow.brokerSecretRef" . | trim | nindent 8 }}
{{- end }}

{{/* The data directory (GPUFLOW_DATA_DIR=/data): a shared claim or an emptyDir. */}}
{{- define "gpuflow.dataVolume" -}}
- name: data
{{- if .Values.data.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.data.existingClaim }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end }}

{{/* Containers of gpuflow's own image run as an unprivileged user, read-only. */}}
{{- define "gpuflow.restrictedSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Fail early on values that cannot work together (values.schema.json checks each
value on its own: types, ranges, names). */}}
{{- define "gpuflow.validate" -}}
{{- if and (not .Values.postgresql.enabled) (not .Values.externalDatabase.url) (not .Values.externalDatabase.existingSecret) }}
{{- fail "postgresql.enabled=false needs externalDatabase.url or externalDatabase.existingSecret" }}
{{- end }}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.url) (not .Values.externalRedis.existingSecret) }}
{{- fail "redis.enabled=false needs externalRedis.url or externalRedis.existingSecret" }}
{{- end }}
{{- if and (eq .Values.api.mode "local") (gt (int .Values.api.replicas) 1) }}
{{- fail "api.mode=local runs the simulated cluster in the API process: api.replicas must be 1" }}
{{- end }}
{{- if and (eq .Values.api.mode "local") (gt (int .Values.api.workers) 1) }}
{{- fail "api.mode=local runs the simulated cluster in one process: api.workers must be 1" }}
{{- end }}
{{- end }}
