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

{{/*
Operator shards as a JSON list of {name, namespaces, maxConcurrentTasks?, resources?}: the
`shards` value, or one unnamed shard watching watchNamespaces (empty: all namespaces).
*/}}
{{- define "ordo.shards" -}}
{{- if .Values.shards -}}
{{- toJson .Values.shards -}}
{{- else -}}
{{- toJson (list (dict "name" "" "namespaces" .Values.watchNamespaces)) -}}
{{- end -}}
{{- end -}}

{{/* Every watched namespace as a JSON list (empty: all namespaces). */}}
{{- define "ordo.watchedNamespaces" -}}
{{- $all := list -}}
{{- range fromJsonArray (include "ordo.shards" .) -}}
{{- $all = concat $all .namespaces -}}
{{- end -}}
{{- toJson $all -}}
{{- end -}}

{{/* "true" when the operator watches listed namespaces (Roles), "" when all (ClusterRole). */}}
{{- define "ordo.namespaced" -}}
{{- if or .Values.watchNamespaces .Values.shards -}}true{{- end -}}
{{- end -}}

{{/* A name with the shard's suffix, from (list NAME SHARD): NAME-SHARD, or NAME unsharded. */}}
{{- define "ordo.sharded" -}}
{{- $name := index . 0 -}}
{{- $shard := index . 1 -}}
{{- if $shard.name -}}
{{- printf "%s-%s" $name $shard.name -}}
{{- else -}}
{{- $name -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of a shard's operator, from (list ROOT SHARD). */}}
{{- define "ordo.shardServiceAccountName" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.serviceAccount.create -}}
{{- include "ordo.sharded" (list (include "ordo.serviceAccountName" $root) (index . 1)) -}}
{{- else -}}
{{- include "ordo.serviceAccountName" $root -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of a shard's pods, from (list ROOT SHARD). */}}
{{- define "ordo.shardSelectorLabels" -}}
{{ include "ordo.selectorLabels" (index . 0) }}
{{- with (index . 1).name }}
ordo.dev/shard: {{ . }}
{{- end }}
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

{{/*
An image tag as text, from (list TAG APPVERSION): empty means APPVERSION. A number is written
in full: `--set image.tag=1` gives an int64, a values file's `tag: 20240101` a float64 that
printf would write as 2.0240101e+07 (the schema admits whole numbers only).
*/}}
{{- define "ordo.tag" -}}
{{- $tag := index . 0 -}}
{{- if kindIs "float64" $tag -}}
{{- $tag = int64 $tag -}}
{{- end -}}
{{- if or (kindIs "int64" $tag) (kindIs "int" $tag) -}}
{{- toString $tag -}}
{{- else -}}
{{- default (index . 1) $tag | toString -}}
{{- end -}}
{{- end -}}

{{- define "ordo.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "ordo.tag" (list .Values.image.tag .Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's RBAC rules, the same whether they go into a ClusterRole (all namespaces) or a
Role in each watched namespace. Derived from what the operator does (docs/security.md):
- kopf watches all eight ordo kinds (list, watch); ordo's client reads them (get, list).
- Tasks: patch, only ever of metadata.finalizers (the ordo.dev/run finalizer), conditional on
  resourceVersion. RBAC cannot narrow a patch to one field; the Task spec is immutable by CEL
  except `cancel` (and `input`, which the operator never writes). Delete: a finished Task
  whose TTL passed (spec.ttlSecondsAfterFinished, --task-ttl), resourceVersion-conditional.
- Status subresources it writes (merge patch): all eight ordo kinds (Task progress and results,
  the Ready condition of the others), teams and taskschedules (a schedule's Tasks are
  created, cancelled and deleted with the Task verbs: docs/triggers.md#schedules).
- Secrets: get by name only (the ones ModelEndpoints, Tools and Memories name); never list or
  watch, so the operator cannot enumerate Secrets.
- ConfigMaps: the per-Task checkpoint ordo-checkpoint-<task uid> (get, create, update, delete).
  Its name is not known in advance, so resourceNames cannot narrow it.
- Events: create (core/v1), ordo's own sanitised Events.
- No Leases: the execution lease of a running Task is in its status (status.lease).
- Jobs (batch): the Job ordo-task-<task uid> of a Job-mode Task (create; get and a watch to
  supervise it; delete to stop it). Pods: get, list, to map a failed pod to a Task reason
  (OOMKilled, image not present). ConfigMaps also need patch: each checkpoint after the first
  is a JSON Patch fenced on the execution annotation.
- With peering: kopf's peering objects (list, watch; get and patch of its own one).
*/}}
{{- define "ordo.rules" -}}
- apiGroups: [ordo.dev]
  resources: [tasks, agents, modelendpoints, tools, memories, agentroles, toolpermissions, agentpolicies, guardrails, toolapprovals, teams, taskwebhooks, taskschedules]
  verbs: [get, list, watch]
- apiGroups: [ordo.dev]
  resources: [tasks]
  verbs: [create, patch, delete]
- apiGroups: [ordo.dev]
  resources: [tasks/finalizers]
  verbs: [update]
- apiGroups: [ordo.dev]
  resources: [tasks/status, agents/status, modelendpoints/status, tools/status, memories/status, agentroles/status, toolpermissions/status, agentpolicies/status, guardrails/status, toolapprovals/status, teams/status, taskwebhooks/status, taskschedules/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
{{- end -}}

{{/* The operator's rules on its process Leases, in the release namespace (lease-rbac.yaml). */}}
{{- define "ordo.leaseRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [list, watch, create, patch, delete]
{{- end -}}

{{/*
The rules of the runner ServiceAccount that Job-mode pods (`ordo run-task`) use, in one
namespace: read the ordo objects a Task references (get, list; never watch), write that
Task's status (and lease) and finalizer, its checkpoint ConfigMap and Events, and get
only the Secrets named in jobs.secretNames. Nothing in any other namespace, no Secret list.
*/}}
{{- define "ordo.runnerRules" -}}
- apiGroups: [ordo.dev]
  resources: [tasks, agents, modelendpoints, tools, memories, agentroles, toolpermissions, agentpolicies, guardrails, toolapprovals]
  verbs: [get, list]
- apiGroups: [ordo.dev]
  resources: [tasks]
  verbs: [create, patch]
- apiGroups: [ordo.dev]
  resources: [tasks/finalizers]
  verbs: [update]
- apiGroups: [ordo.dev]
  resources: [tasks/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- with .Values.jobs.secretNames }}
- apiGroups: [""]
  resources: [secrets]
  resourceNames: {{ toJson . }}
  verbs: [get]
{{- end }}
{{- end -}}

{{- define "ordo.jobImage" -}}
{{- $img := .Values.jobs.image -}}
{{- if not $img.repository -}}
{{- include "ordo.image" . -}}
{{- else if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (include "ordo.tag" (list $img.tag .Chart.AppVersion)) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces that get the runner ServiceAccount and Role: jobs.namespaces, else the watched ones. */}}
{{- define "ordo.runnerNamespaces" -}}
{{- toJson (default (fromJsonArray (include "ordo.watchedNamespaces" .)) .Values.jobs.namespaces) -}}
{{- end -}}

{{- define "ordo.peeringRules" -}}
{{- $kind := ternary "kopfpeerings" "clusterkopfpeerings" (eq (include "ordo.namespaced" .) "true") -}}
- apiGroups: [kopf.dev]
  resources: [{{ $kind }}]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [{{ $kind }}]
  resourceNames: [{{ include "ordo.peeringName" . | quote }}]
  verbs: [get, patch]
{{- end -}}

{{/*
Render-time checks the schema cannot express. Shards are safe by construction: a namespace
in two shards would have two operators racing for its Tasks, so it is refused by name.
*/}}
{{- define "ordo.validate" -}}
{{- $seen := dict -}}
{{- range .Values.watchNamespaces -}}
{{- if hasKey $seen . -}}
{{- fail (printf "watchNamespaces lists %q twice" .) -}}
{{- end -}}
{{- $_ := set $seen . true -}}
{{- end -}}
{{- if and .Values.shards .Values.watchNamespaces -}}
{{- fail "set either watchNamespaces (one operator) or shards (one operator per shard), not both" -}}
{{- end -}}
{{- $owner := dict -}}
{{- $names := dict -}}
{{- range $shard := .Values.shards -}}
{{- if hasKey $names $shard.name -}}
{{- fail (printf "shards: the name %q is used twice" $shard.name) -}}
{{- end -}}
{{- $_ := set $names $shard.name true -}}
{{- $deployment := include "ordo.sharded" (list (include "ordo.fullname" $) $shard) -}}
{{- if gt (len $deployment) 63 -}}
{{- fail (printf "shards: %q makes the Deployment name %q longer than 63 characters; shorten the shard name or fullnameOverride" $shard.name $deployment) -}}
{{- end -}}
{{- range $ns := $shard.namespaces -}}
{{- if hasKey $owner $ns -}}
{{- fail (printf "shards: namespace %q is in shard %q and in shard %q; a namespace must belong to one shard only" $ns (get $owner $ns) $shard.name) -}}
{{- end -}}
{{- $_ := set $owner $ns $shard.name -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A resource map as the operator's --job-requests/--job-limits flag: cpu=100m,memory=128Mi. */}}
{{- define "ordo.quantities" -}}
{{- $parts := list -}}
{{- range $k, $v := . -}}
{{- $parts = append $parts (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/*
"true" when the chart renders ordo's ValidatingAdmissionPolicies (admissionPolicies.enabled):
`auto` renders them with a cluster-wide install only (they are cluster-scoped, and a namespaced
install creates nothing cluster-wide); `true` renders them in either (a cluster admin installs
them; a namespaced install binds them to its watched namespaces only); `false` never.
*/}}
{{- define "ordo.admissionPolicies" -}}
{{- $enabled := .Values.admissionPolicies.enabled -}}
{{- if or (eq (toString $enabled) "true") (and (eq (toString $enabled) "auto") (not (include "ordo.namespaced" .))) -}}true{{- end -}}
{{- end -}}

{{/*
The matchResources of an admission policy's binding: every namespace with a cluster-wide
install, the watched namespaces (every shard's) with a namespaced one.
*/}}
{{- define "ordo.admissionPolicyMatchResources" -}}
{{- if include "ordo.namespaced" . -}}
matchResources:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ include "ordo.watchedNamespaces" . }}
{{- else -}}
matchResources: {}
{{- end -}}
{{- end -}}

{{- define "ordo.checkpointKeySecret" -}}
{{- default (printf "%s-checkpoint-key" (include "ordo.fullname" .)) .Values.checkpoints.keySecret.name -}}
{{- end -}}

{{/* The gateway's pods: their own app.kubernetes.io/name, so no operator selector matches. */}}
{{- define "ordo.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "ordo.name" . }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ordo.gatewayLabels" -}}
helm.sh/chart: {{ include "ordo.chart" . }}
{{ include "ordo.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: ordo
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ordo.gatewayServiceAccountName" -}}
{{- printf "%s-gateway" (include "ordo.fullname" .) -}}
{{- end -}}
