{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "rwrouter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or the release name when it contains the chart name. */}}
{{- define "rwrouter.fullname" -}}
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

{{- define "rwrouter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rwrouter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rwrouter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rwrouter.labels" -}}
helm.sh/chart: {{ include "rwrouter.chart" . }}
{{ include "rwrouter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rwrouter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rwrouter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rwrouter.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The configuration as a map, whether `config` is a YAML value or a string. */}}
{{- define "rwrouter.configMap" -}}
{{- if kindIs "string" .Values.config }}
{{- .Values.config | fromYaml | toJson }}
{{- else }}
{{- .Values.config | toJson }}
{{- end }}
{{- end }}

{{/* The text of rwrouter.yaml. */}}
{{- define "rwrouter.configText" -}}
{{- if kindIs "string" .Values.config }}
{{- .Values.config }}
{{- else }}
{{- toYaml .Values.config }}
{{- end }}
{{- end }}

{{/*
server.shutdown_timeout in milliseconds: a Prometheus duration ("30s", "1m30s", "500ms", "0";
default 30s).
*/}}
{{- define "rwrouter.shutdownTimeoutMs" -}}
{{- $cfg := include "rwrouter.configMap" . | fromJson }}
{{- $server := default dict (get $cfg "server") }}
{{- $raw := "30s" }}
{{- if hasKey $server "shutdown_timeout" }}
{{- $raw = toString (get $server "shutdown_timeout") }}
{{- end }}
{{- $units := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 }}
{{- $total := 0 }}
{{- range $part := regexFindAll "[0-9]+(ms|[ywdhms])" $raw -1 }}
{{- $num := regexFind "^[0-9]+" $part }}
{{- $unit := trimPrefix $num $part }}
{{- $total = add $total (mul (int64 $num) (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/* Refuse value combinations that would break rwrouter's guarantees. */}}
{{- define "rwrouter.validate" -}}
{{- $scaled := or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- if and $scaled (ne (toString .Values.service.sessionAffinity) "ClientIP") }}
{{- fail "replicaCount > 1 or autoscaling.enabled needs service.sessionAffinity: ClientIP, so that each Prometheus always reaches the same replica and its series keep their order (or run rwrouter as a sidecar of each Prometheus): see Scaling in the chart README" }}
{{- end }}
{{- if not (has (toString .Values.service.sessionAffinity) (list "None" "ClientIP")) }}
{{- fail (printf "service.sessionAffinity must be None or ClientIP, got %q" (toString .Values.service.sessionAffinity)) }}
{{- end }}
{{- if and (not (kindIs "invalid" .Values.workers)) (lt (int .Values.workers) 1) }}
{{- fail (printf "workers must be null or an integer >= 1, got %v" .Values.workers) }}
{{- end }}
{{- $shutdownMs := include "rwrouter.shutdownTimeoutMs" . | int64 }}
{{- if le (mul (int64 .Values.terminationGracePeriodSeconds) 1000) $shutdownMs }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be larger than config.server.shutdown_timeout (%vms): rwrouter drains its queues that long after SIGTERM and must stop before the SIGKILL" .Values.terminationGracePeriodSeconds $shutdownMs) }}
{{- end }}
{{- end }}

{{/* The pod template shared by the Deployment and the StatefulSet. */}}
{{- define "rwrouter.podTemplate" -}}
metadata:
  labels:
    {{- include "rwrouter.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "rwrouter.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.automountServiceAccountToken }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: rwrouter
      image: {{ include "rwrouter.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      {{- if not (kindIs "invalid" .Values.workers) }}
      args:
        - --workers
        - {{ int .Values.workers | quote }}
      {{- end }}
      ports:
        - name: http
          containerPort: 9250
          protocol: TCP
      {{- if or .Values.workspace.region .Values.workspace.id .Values.env }}
      env:
        {{- with .Values.workspace.region }}
        - name: AWS_REGION
          value: {{ . | quote }}
        {{- end }}
        {{- with .Values.workspace.id }}
        - name: AMP_WORKSPACE_ID
          value: {{ . | quote }}
        {{- end }}
        {{- with .Values.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      {{- with .Values.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      livenessProbe:
        httpGet:
          path: /-/healthy
          port: http
        {{- toYaml .Values.livenessProbe | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /-/ready
          port: http
        {{- toYaml .Values.readinessProbe | nindent 8 }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/rwrouter
          readOnly: true
        - name: data
          mountPath: /var/lib/rwrouter
  volumes:
    - name: config
      configMap:
        name: {{ include "rwrouter.fullname" . }}
    {{- if not .Values.persistence.enabled }}
    - name: data
      {{- if .Values.emptyDir.sizeLimit }}
      emptyDir:
        sizeLimit: {{ .Values.emptyDir.sizeLimit }}
      {{- else }}
      emptyDir: {}
      {{- end }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
