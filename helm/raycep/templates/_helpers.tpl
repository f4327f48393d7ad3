{{/* Names, labels and small shared pieces of the raycep chart. */}}

{{- define "raycep.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/*
The full name, also the RayCluster's name. At most 40 characters: KubeRay derives the head
service (<name>-head-svc) and pod names (<name>-<group>-worker-xxxxx) from it.
*/}}
{{- define "raycep.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "raycep.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "raycep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "raycep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "raycep.labels" -}}
helm.sh/chart: {{ include "raycep.chart" . }}
{{ include "raycep.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "raycep.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the gateway's bearer token (key "token"). */}}
{{- define "raycep.tokenSecret" -}}
{{- default (include "raycep.fullname" .) .Values.gateway.existingSecret }}
{{- end }}

{{/* The Secret holding the Ray auth token (key "auth_token"), when ray.auth is "token". */}}
{{- define "raycep.rayAuthSecret" -}}
{{- printf "%s-ray-auth" (include "raycep.fullname" .) }}
{{- end }}

{{/* KubeRay's name for the head service of the RayCluster. */}}
{{- define "raycep.headService" -}}
{{- printf "%s-head-svc" (include "raycep.fullname" .) }}
{{- end }}

{{- define "raycep.dataClaim" -}}
{{- default (printf "%s-data" (include "raycep.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{/* The Ray nodes of the cluster: the head and the replicas of every worker group. */}}
{{- define "raycep.nodes" -}}
{{- $n := 1 }}
{{- range .Values.workerGroups }}{{ $n = add $n .replicas }}{{ end }}
{{- $n }}
{{- end }}

{{/* Where the head pod mounts the registry volume and the ConfigMap. */}}
{{- define "raycep.dataDir" -}}/var/lib/raycep{{- end }}
{{- define "raycep.configDir" -}}/etc/raycep{{- end }}

{{/*
A random token that survives upgrades: the value already in the named Secret when the release
exists (lookup; empty in `helm template`), else a new one. Call with (list $ secretName key).
*/}}
{{- define "raycep.keptRandom" -}}
{{- $root := index . 0 }}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (index . 1) }}
{{- if and $existing $existing.data (hasKey $existing.data (index . 2)) }}
{{- index $existing.data (index . 2) }}
{{- else }}
{{- randAlphaNum 40 | b64enc }}
{{- end }}
{{- end }}

{{/* Pod-level settings shared by the head and the worker groups. Call with (list $ group). */}}
{{- define "raycep.podCommon" -}}
{{- $root := index . 0 }}
{{- $group := index . 1 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Checks across values that the schema cannot express; a failed check names the fields. */}}
{{- define "raycep.validate" -}}
{{- range $i, $g := .Values.workerGroups }}
{{- if or (gt (int $g.minReplicas) (int $g.replicas)) (gt (int $g.replicas) (int $g.maxReplicas)) }}
{{- fail (printf "workerGroups[%d] (%s): need minReplicas <= replicas <= maxReplicas, got %d <= %d <= %d" $i $g.name (int $g.minReplicas) (int $g.replicas) (int $g.maxReplicas)) }}
{{- end }}
{{- end }}
{{- $names := list }}
{{- range .Values.workerGroups }}
{{- if has .name $names }}
{{- fail (printf "workerGroups: the name %q is used twice" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- if and .Values.service.nodePort (eq .Values.service.type "ClusterIP") }}
{{- fail "service.nodePort is set but service.type is ClusterIP (use NodePort or LoadBalancer)" }}
{{- end }}
{{- if and .Values.gateway.token .Values.gateway.existingSecret }}
{{- fail "gateway.token and gateway.existingSecret are both set; give one" }}
{{- end }}
{{- end }}

{{/* Volumes every Ray pod gets: /dev/shm for the object store, the ingestion data. */}}
{{- define "raycep.rayVolumes" -}}
{{- if .Values.ray.shmSize }}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.ray.shmSize }}
{{- end }}
{{- if and .Values.ingestion.enabled .Values.ingestion.dataVolume }}
- name: ingest-data
  {{- toYaml .Values.ingestion.dataVolume | nindent 2 }}
{{- end }}
{{- if .Values.checkpoints.volume }}
- name: checkpoints
  {{- toYaml .Values.checkpoints.volume | nindent 2 }}
{{- end }}
{{- end }}

{{- define "raycep.rayMounts" -}}
{{- if .Values.ray.shmSize }}
- name: shm
  mountPath: /dev/shm
{{- end }}
{{- if and .Values.ingestion.enabled .Values.ingestion.dataVolume }}
- name: ingest-data
  mountPath: {{ .Values.ingestion.mountPath }}
  readOnly: true
{{- end }}
{{- if .Values.checkpoints.volume }}
- name: checkpoints
  mountPath: {{ .Values.checkpoints.mountPath }}
{{- end }}
{{- end }}

{{/* The actors' checkpoint directory (raycep serve --checkpoint-dir) */}}
{{- define "raycep.checkpointDir" -}}
{{- if .Values.checkpoints.volume -}}
{{ .Values.checkpoints.mountPath }}
{{- else -}}
{{ include "raycep.dataDir" . }}/checkpoints
{{- end -}}
{{- end }}
