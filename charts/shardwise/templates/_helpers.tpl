{{/* Names and labels shared by every template. */}}

{{- define "shardwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardwise.fullname" -}}
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

{{- define "shardwise.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "shardwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shardwise
{{- end -}}

{{/* Selector labels never include the version: a Deployment's selector is immutable. */}}
{{- define "shardwise.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shardwise.operator.selectorLabels" -}}
{{ include "shardwise.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "shardwise.labeler.selectorLabels" -}}
{{ include "shardwise.selectorLabels" . }}
app.kubernetes.io/component: labeler
{{- end -}}

{{- define "shardwise.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shardwise.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "shardwise.labeler.fullname" -}}
{{- printf "%s-labeler" (include "shardwise.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardwise.labeler.serviceAccountName" -}}
{{- if .Values.labeler.serviceAccount.create -}}
{{- default (include "shardwise.labeler.fullname" .) .Values.labeler.serviceAccount.name -}}
{{- else -}}
{{- required "labeler.serviceAccount.name is required when labeler.serviceAccount.create is false" .Values.labeler.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository@digest when a digest is pinned, else repository:tag (default: appVersion). */}}
{{- define "shardwise.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap name the operator reads (controller/settings.py: pricing_configmap). */}}
{{- define "shardwise.pricingConfigMap" -}}shardwise-pricing{{- end -}}

{{/* Container hardening shared by the operator and the labeler (Pod Security "restricted"). */}}
{{- define "shardwise.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "shardwise.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "shardwise.gateway.fullname" -}}
{{- printf "%s-gateway" (include "shardwise.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardwise.gateway.selectorLabels" -}}
{{ include "shardwise.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}
