{{/* Names, labels and the operator's RBAC rules. */}}

{{- define "ordo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ordo.fullname" -}}
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

{{- define "ordo.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ordo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ordo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ordo.labels" -}}
helm.sh/chart: {{ include "ordo.chart" . }}
{{ include "ordo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: ordo
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ordo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ordo.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ordo.peeringName" -}}
{{- default (include "ordo.fullname" .) .Values.peering.name -}}
{{- end -}}

{{- define "ordo.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's RBAC rules, the same whether they go into a ClusterRole (all namespaces) or a
Role in each watched namespace. Derived from what the operator does (docs/security.md):
- kopf watches all eight ordo kinds (list, watch); ordo's client reads them (get, list).
- Tasks: patch, only ever of metadata.finalizers (the ordo.dev/run finalizer), conditional on
  resourceVersion. RBAC cannot narrow a patch to one field; the Task spec is immutable by CEL
  except `cancel` (and `input`, which the operator never writes).
- Status subresources it writes (merge patch): all eight ordo kinds (Task progress and results,
  the Ready condition of the others).
- Secrets: get by name only (the ones ModelEndpoints, Tools and Memories name); never list or
  watch, so the operator cannot enumerate Secrets.
- ConfigMaps: the per-Task checkpoint ordo-checkpoint-<task uid> (get, create, update, delete).
  Its name is not known in advance, so resourceNames cannot narrow it.
- Events: create (core/v1), ordo's own sanitised Events.
- Leases: the execution lease ordo-task-<task uid> of each running Task (get, create, update,
  delete), so that only one process executes a Task (coordination.k8s.io).
- With peering: kopf's peering objects (list, watch; get and patch of its own one).
*/}}
{{- define "ordo.rules" -}}
- apiGroups: [ordo.dev]
  resources: [tasks, agents, modelendpoints, tools, memories, agentroles, toolpermissions, agentpolicies]
  verbs: [get, list, watch]
- apiGroups: [ordo.dev]
  resources: [tasks]
  verbs: [patch]
- apiGroups: [ordo.dev]
  resources: [tasks/status, agents/status, modelendpoints/status, tools/status, memories/status, agentroles/status, toolpermissions/status, agentpolicies/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update, delete]
{{- end -}}

{{- define "ordo.peeringRules" -}}
{{- $kind := ternary "kopfpeerings" "clusterkopfpeerings" (gt (len .Values.watchNamespaces) 0) -}}
- apiGroups: [kopf.dev]
  resources: [{{ $kind }}]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [{{ $kind }}]
  resourceNames: [{{ include "ordo.peeringName" . | quote }}]
  verbs: [get, patch]
{{- end -}}

{{- define "ordo.validate" -}}
{{- $seen := dict -}}
{{- range .Values.watchNamespaces -}}
{{- if hasKey $seen . -}}
{{- fail (printf "watchNamespaces lists %q twice" .) -}}
{{- end -}}
{{- $_ := set $seen . true -}}
{{- end -}}
{{- end -}}
