{{/* The chart's name, at most 63 characters (a label value). */}}
{{- define "splitflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release's, with the chart's unless it holds it. */}}
{{- define "splitflow.fullname" -}}
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

{{- define "splitflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "splitflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The savepoint hook's labels: none of the processes' selector. */}}
{{- define "splitflow.savepointLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "splitflow.name" . }}-savepoint
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: savepoint
splitflow.dev/job: {{ .Values.upgradeSavepoint.jobName | default .Values.job.name | quote }}
{{- end -}}

{{- define "splitflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "splitflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: job
splitflow.dev/job: {{ .Values.job.name | quote }}
{{- end -}}

{{/*
The consumer group the job's Kafka sources commit their offsets to
(--source-group-id), and so the group whose lag KEDA reads: job.sourceGroupId,
or "<job.name>.source". It must differ from job.name, the group the
processes themselves join.
*/}}
{{- define "splitflow.sourceGroupId" -}}
{{- default (printf "%s.source" .Values.job.name) .Values.job.sourceGroupId -}}
{{- end -}}

{{/*
The PromQL query of KEDA's Prometheus trigger: the job's input lag,
summed over its processes, each of which reports the slots it owns
(splitflow_source_lag_records, labelled job_name with --job-name; the
namespace label is the one the Prometheus Operator and the usual pod
scrape configurations add).
*/}}
{{- define "splitflow.kedaLagQuery" -}}
{{- $q := .Values.autoscaling.keda.prometheus.query -}}
{{- if $q -}}
{{- $q -}}
{{- else -}}
{{- printf "sum(splitflow_source_lag_records{namespace=%q,job_name=%q})" .Release.Namespace .Values.job.name -}}
{{- end -}}
{{- end -}}

{{/* The checkpoint directory: s3://bucket/prefix. */}}
{{- define "splitflow.checkpointDir" -}}
{{- $s3 := .Values.checkpoints.s3 -}}
{{- if not $s3.bucket -}}
{{- fail "checkpoints.s3.bucket is required: a distributed job keeps each slot's checkpoints where every process reaches them, and a pod's disk dies with the pod" -}}
{{- end -}}
{{- if $s3.prefix -}}
{{- printf "s3://%s/%s" $s3.bucket (trimAll "/" $s3.prefix) -}}
{{- else -}}
{{- printf "s3://%s" $s3.bucket -}}
{{- end -}}
{{- end -}}

{{/*
The most processes the job may run: job.slots less rollingUpdate.maxSurge.
A process owns slots only once the group gives it some, and the group's
assignment is cooperative-sticky: while every process owns a slot, one
more (the new process of a rolling update) gets none, so it never
completes a checkpoint, never becomes ready (/readyz), and the update
stops there. Below this count every process of an update gets a slot.
*/}}
{{- define "splitflow.maxProcesses" -}}
{{- $surge := int .Values.rollingUpdate.maxSurge -}}
{{- if lt $surge 1 -}}
{{- fail (printf "rollingUpdate.maxSurge must be a number of processes, 1 or more, not %v: maxUnavailable is 0, so an update must start a process before it stops one" .Values.rollingUpdate.maxSurge) -}}
{{- end -}}
{{- $max := sub (int .Values.job.slots) $surge -}}
{{- if lt $max 1 -}}
{{- fail (printf "job.slots (%v) leaves no room for rollingUpdate.maxSurge (%d): a rolling update's new process would get no slot and never become ready; give the job more slots" .Values.job.slots $surge) -}}
{{- end -}}
{{- $max -}}
{{- end -}}

{{/*
The highest replica count KEDA may set: autoscaling.keda.maxReplicas, or
the most processes (splitflow.maxProcesses) when 0. More is refused
rather than capped silently: a process beyond job.slots owns no slot, and
one beyond job.slots less rollingUpdate.maxSurge stops rolling updates.
*/}}
{{- define "splitflow.kedaMaxReplicas" -}}
{{- $slots := int .Values.job.slots -}}
{{- $limit := include "splitflow.maxProcesses" . | int -}}
{{- $max := int (default $limit .Values.autoscaling.keda.maxReplicas) -}}
{{- if gt $max $slots -}}
{{- fail (printf "autoscaling.keda.maxReplicas (%d) must not exceed job.slots (%d): a process beyond the slot count owns no slot and only waits" $max $slots) -}}
{{- end -}}
{{- if gt $max $limit -}}
{{- fail (printf "autoscaling.keda.maxReplicas (%d) must not exceed job.slots (%d) less rollingUpdate.maxSurge (%v): at more processes a rolling update's new process gets no slot and never becomes ready" $max $slots .Values.rollingUpdate.maxSurge) -}}
{{- end -}}
{{- $max -}}
{{- end -}}

{{- define "splitflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "splitflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}
