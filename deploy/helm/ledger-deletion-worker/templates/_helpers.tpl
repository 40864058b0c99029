{{/* Names: the release name when it already says ledger-deletion-worker, else <release>-ledger-deletion-worker. */}}
{{- define "ldw.name" -}}
{{- default "ledger-deletion-worker" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ldw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "ldw.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "ldw.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
app.kubernetes.io/name stays "ledger-deletion-worker" whatever the release is called: the scrape objects take the
job label from it (jobLabel), and the dashboard and the alert rules select job="ledger-deletion-worker".
*/}}
{{- define "ldw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: ledger-deletion-worker
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pulsar
{{- end -}}

{{/* Selector labels of one component (worker, nightly-replay, nightly-audit): (dict "root" . "component" "worker"). */}}
{{- define "ldw.selectorLabels" -}}
app.kubernetes.io/name: ledger-deletion-worker
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ldw.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "ldw.configMountPath" -}}/etc/ledger-deletion-worker{{- end -}}
{{- define "ldw.tokenMountPath" -}}/var/run/secrets/ledger-deletion-worker{{- end -}}
{{- define "ldw.markKeyMountPath" -}}/var/run/secrets/ledger-deletion-mark-key{{- end -}}

{{- define "ldw.hasToken" -}}
{{- if and .Values.secret.name .Values.secret.pulsarTokenKey -}}true{{- end -}}
{{- end -}}

{{/*
The worker's configuration: .Values.config with what the chart itself decides about the pods: the token file it
mounts (pulsar.auth_token_file) and the broker mark key file (worker.broker_mark_key_file).
*/}}
{{- define "ldw.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if include "ldw.hasToken" . -}}
{{- $pulsar := get $config "pulsar" | default dict -}}
{{- $_ := set $pulsar "auth_token_file" (printf "%s/%s" (include "ldw.tokenMountPath" .) .Values.secret.pulsarTokenKey) -}}
{{- $_ := set $config "pulsar" $pulsar -}}
{{- end -}}
{{- if .Values.brokerMarkKey.secretName -}}
{{- $worker := get $config "worker" | default dict -}}
{{- $_ := set $worker "broker_mark_key_file" (printf "%s/%s" (include "ldw.markKeyMountPath" .) .Values.brokerMarkKey.key) -}}
{{- $_ := set $config "worker" $worker -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Whether config.nightly.report_dir is a local path (then each nightly job mounts a claim there). */}}
{{- define "ldw.reportsOnClaim" -}}
{{- if not (contains "://" (toString .Values.config.nightly.report_dir)) -}}true{{- end -}}
{{- end -}}

{{/* The volumes and mounts every pod of the chart has: config, the token file, the mark key, a scratch /tmp. */}}
{{- define "ldw.volumeMounts" -}}
- name: config
  mountPath: {{ include "ldw.configMountPath" . }}
  readOnly: true
{{- if include "ldw.hasToken" . }}
- name: token
  mountPath: {{ include "ldw.tokenMountPath" . }}
  readOnly: true
{{- end }}
{{- if .Values.brokerMarkKey.secretName }}
- name: broker-mark-key
  mountPath: {{ include "ldw.markKeyMountPath" . }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "ldw.volumes" -}}
- name: config
  configMap:
    name: {{ include "ldw.fullname" . }}
{{- if include "ldw.hasToken" . }}
# Owned by the pods' group (fsGroup): readable by the non-root user, by no one else.
- name: token
  secret:
    secretName: {{ .Values.secret.name }}
    defaultMode: 0440
    items:
      - key: {{ .Values.secret.pulsarTokenKey }}
        path: {{ .Values.secret.pulsarTokenKey }}
{{- end }}
{{- if .Values.brokerMarkKey.secretName }}
- name: broker-mark-key
  secret:
    secretName: {{ .Values.brokerMarkKey.secretName }}
    defaultMode: 0440
    items:
      - key: {{ .Values.brokerMarkKey.key }}
        path: {{ .Values.brokerMarkKey.key }}
{{- end }}
# Scratch space only (the root filesystem is read-only; Spark writes its shuffle files here).
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* The S3 keys through the AWS credential chain (every Spark executor of local[*] inherits them). */}}
{{- define "ldw.env" -}}
{{- if and .Values.secret.name .Values.secret.awsAccessKeyIdKey }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secret.name }}
      key: {{ .Values.secret.awsAccessKeyIdKey }}
{{- end }}
{{- if and .Values.secret.name .Values.secret.awsSecretAccessKeyKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secret.name }}
      key: {{ .Values.secret.awsSecretAccessKeyKey }}
{{- end }}
{{- end -}}

{{- define "ldw.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
# The token and key files and the report volume belong to (are readable by) this group.
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ldw.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "ldw.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}
