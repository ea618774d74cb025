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

{{/*
The number of router processes: `workers`, validated (null: 1). Fails for anything but an
integer >= 1 (1.5, "2", true).
*/}}
{{- define "rwrouter.workers" -}}
{{- $w := .Values.workers }}
{{- if kindIs "invalid" $w }}
{{- 1 }}
{{- else }}
{{- $ok := false }}
{{- if or (kindIs "float64" $w) (kindIs "int" $w) (kindIs "int64" $w) }}
{{- $ok = and (eq (float64 $w) (float64 (int64 $w))) (ge (int64 $w) 1) }}
{{- end }}
{{- if not $ok }}
{{- fail (printf "workers must be null or an integer >= 1, got %v (%s)" $w (kindOf $w)) }}
{{- end }}
{{- int64 $w }}
{{- end }}
{{- end }}

{{/*
Bytes of an rwrouter size (docs/configuration.md, Sizes): an integer, or "<integer>[ ]<unit>"
with B, KB/KiB, MB/MiB, GB/GiB, TB/TiB, PB/PiB, all base 2. Called with (list value path).
*/}}
{{- define "rwrouter.configBytes" -}}
{{- $v := index . 0 }}
{{- $path := index . 1 }}
{{- if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) }}
{{- int64 $v }}
{{- else }}
{{- $s := trim (toString $v) }}
{{- $units := dict "" 1 "B" 1 "KB" 1024 "KiB" 1024 "MB" 1048576 "MiB" 1048576 "GB" 1073741824 "GiB" 1073741824 "TB" 1099511627776 "TiB" 1099511627776 "PB" 1125899906842624 "PiB" 1125899906842624 }}
{{- $num := regexFind "^[0-9]+" $s }}
{{- $unit := trim (trimPrefix $num $s) }}
{{- if or (not $num) (not (hasKey $units $unit)) }}
{{- fail (printf "config.%s: expected a size such as 1GiB or 512MiB, got %q" $path $s) }}
{{- end }}
{{- mul (int64 $num) (get $units $unit) }}
{{- end }}
{{- end }}

{{/*
Bytes of a Kubernetes quantity written as an integer with an optional suffix (Ki Mi Gi Ti Pi Ei,
k M G T P E); empty when written otherwise (e.g. 1.5Gi): the caller then cannot check it.
*/}}
{{- define "rwrouter.quantityBytes" -}}
{{- $s := trim (toString .) }}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 }}
{{- $num := regexFind "^[0-9]+" $s }}
{{- $unit := trimPrefix $num $s }}
{{- if and $num (hasKey $units $unit) }}
{{- mul (int64 $num) (get $units $unit) }}
{{- end }}
{{- end }}

{{/*
audit.max_series of the configuration (a map; default 2000000): the series each audited
destination remembers, per worker. Fails for anything but a number (rwrouter wants an integer).
*/}}
{{- define "rwrouter.auditMaxSeries" -}}
{{- $audit := default dict (get . "audit") }}
{{- $v := 2000000 }}
{{- if hasKey $audit "max_series" }}
{{- $v = get $audit "max_series" }}
{{- if not (or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v)) }}
{{- fail (printf "config.audit.max_series: expected an integer such as 500000, got %v (%s)" $v (kindOf $v)) }}
{{- end }}
{{- end }}
{{- int64 $v }}
{{- end }}

{{/*
What the configuration may use, as JSON {"disk": bytes, "memory": bytes} for the whole pod
(all workers):
  disk   = workers x sum over queued destinations of (queue_config.max_disk_bytes [1GiB]
           + storage.rejected_max_bytes [64MiB])
  memory = workers x (relabel_cache.max_bytes [1GiB]
           + sum over queued destinations of queue_config.max_memory_bytes [256MiB]
           + audit.max_series [2000000] x 100 bytes per audited destination
           + server.max_buffered_body_bytes [128MiB] + 150MiB base)
A queued destination is one without `shadow: true` (a shadow destination has no queue, no disk,
no read-ahead); an audited one has `shadow: true` or `audit: true` (bench/RESULTS.md measured
83 bytes per series remembered; 100 is the margin); a destination with a series budget
`series_limit` x 100 bytes more (its active series, remembered as the audit's).
With workers > 1, disk also holds the tables the workers share, once per pod, in the
supervisor's runtime directory (TMPDIR, /var/lib/rwrouter: the queue volume):
  + 2MiB, the HA election table (4096 slots x 512 bytes, src/rwrouter/pipeline/ha.py)
  + per destination with series_limit, its series budget's table (pipeline/budgets.py
    table_bytes): 4096 + 16 x the smallest power of two >= 2 x (series_limit
    + series_limit / 4 + 1024) bytes: 64MiB + 4KiB for series_limit 1000000
(the connection board, 8 bytes a worker, is left out).
*/}}
{{- define "rwrouter.bounds" -}}
{{- $cfg := include "rwrouter.configMap" . | fromJson }}
{{- $workers := include "rwrouter.workers" . | int64 }}
{{- $storage := default dict (get $cfg "storage") }}
{{- $rejected := include "rwrouter.configBytes" (list (default "64MiB" (get $storage "rejected_max_bytes")) "storage.rejected_max_bytes") | int64 }}
{{- $cache := default dict (get $cfg "relabel_cache") }}
{{- $memory := include "rwrouter.configBytes" (list (default "1GiB" (get $cache "max_bytes")) "relabel_cache.max_bytes") | int64 }}
{{- $memory = add $memory 157286400 }}
{{- $server := default dict (get $cfg "server") }}
{{- $memory = add $memory (include "rwrouter.configBytes" (list (default "128MiB" (get $server "max_buffered_body_bytes")) "server.max_buffered_body_bytes") | int64) }}
{{- $auditMemory := mul (include "rwrouter.auditMaxSeries" $cfg | int64) 100 }}
{{- $disk := 0 }}
{{- $shared := 0 }}
{{- if gt $workers 1 }}
{{- $shared = 2097152 }}
{{- end }}
{{- range $i, $dest := (default list (get $cfg "remote_write")) }}
{{- $d := default dict $dest }}
{{- $shadow := eq (toString (get $d "shadow")) "true" }}
{{- if or $shadow (eq (toString (get $d "audit")) "true") }}
{{- $memory = add $memory $auditMemory }}
{{- end }}
{{- with (get $d "series_limit") }}
{{- $memory = add $memory (mul (int64 .) 100) }}
{{- if gt $workers 1 }}
{{- $slots := mul 2 (add (int64 .) (div (int64 .) 4) 1024) }}
{{- $capacity := 1 }}
{{- range until 64 }}{{ if lt $capacity $slots }}{{ $capacity = mul $capacity 2 }}{{ end }}{{ end }}
{{- $shared = add $shared 4096 (mul $capacity 16) }}
{{- end }}
{{- end }}
{{- if not $shadow }}
{{- $queue := default dict (get $d "queue_config") }}
{{- $disk = add $disk $rejected (include "rwrouter.configBytes" (list (default "1GiB" (get $queue "max_disk_bytes")) (printf "remote_write[%d].queue_config.max_disk_bytes" $i)) | int64) }}
{{- $memory = add $memory (include "rwrouter.configBytes" (list (default "256MiB" (get $queue "max_memory_bytes")) (printf "remote_write[%d].queue_config.max_memory_bytes" $i)) | int64) }}
{{- end }}
{{- end }}
{{- dict "disk" (add (mul $disk $workers) $shared) "memory" (mul $memory $workers) | toJson }}
{{- end }}

{{/*
The emptyDir sizeLimit: `emptyDir.sizeLimit`, or with "auto" the disk bound of the
configuration (rwrouter.bounds) plus a quarter and 64Mi, in Mi.
*/}}
{{- define "rwrouter.emptyDirSizeLimit" -}}
{{- if eq (toString .Values.emptyDir.sizeLimit) "auto" }}
{{- $disk := get (include "rwrouter.bounds" . | fromJson) "disk" | int64 }}
{{- $mi := div (add (mul $disk 5) (sub (mul 4 1048576) 1)) (mul 4 1048576) }}
{{- printf "%dMi" (add $mi 64) }}
{{- else }}
{{- .Values.emptyDir.sizeLimit }}
{{- end }}
{{- end }}

{{/* The port of config.server.listen_address, which must be on all interfaces. */}}
{{- define "rwrouter.listenPort" -}}
{{- $cfg := include "rwrouter.configMap" . | fromJson }}
{{- $server := default dict (get $cfg "server") }}
{{- $addr := toString (default "0.0.0.0:9250" (get $server "listen_address")) }}
{{- $port := regexFind "[^:]*$" $addr }}
{{- $host := trimSuffix (printf ":%s" $port) $addr }}
{{- if not (has $host (list "0.0.0.0" "[::]")) }}
{{- fail (printf "config.server.listen_address must listen on all interfaces (0.0.0.0:<port> or [::]:<port>): the probes and the Service reach the pod's IP; got %q" $addr) }}
{{- end }}
{{- if or (not (regexMatch "^[0-9]+$" $port)) (lt (int64 $port) 1) (gt (int64 $port) 65535) }}
{{- fail (printf "config.server.listen_address must have a fixed port 1..65535 (the container port, the probes and the Service use it); got %q" $addr) }}
{{- end }}
{{- int64 $port }}
{{- end }}

{{/* Refuse value combinations that would break rwrouter's guarantees. */}}
{{- define "rwrouter.validate" -}}
{{- include "rwrouter.validateWeb" . }}
{{- $scaled := or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- $cfg := include "rwrouter.configMap" . | fromJson }}
{{- /* HA pairs: one election per rwrouter (its workers share it; two pods do not) */}}
{{- range $dest := default list (get $cfg "remote_write") }}
{{- if and $scaled (kindIs "map" $dest) (hasKey $dest "ha_dedup") }}
{{- fail (printf "config.remote_write %q has ha_dedup: it needs replicaCount 1 and no autoscaling, since both Prometheus replicas of an HA pair must reach the same rwrouter for one election (the workers of one pod share it, two pods do not): see HA pairs in the chart README" (toString (get $dest "name"))) }}
{{- end }}
{{- end }}
{{- if and $scaled (ne (toString .Values.service.sessionAffinity) "ClientIP") }}
{{- fail "replicaCount > 1 or autoscaling.enabled needs service.sessionAffinity: ClientIP, so that each Prometheus always reaches the same replica and its series keep their order (or run rwrouter as a sidecar of each Prometheus): see Scaling in the chart README" }}
{{- end }}
{{- if not (has (toString .Values.service.sessionAffinity) (list "None" "ClientIP")) }}
{{- fail (printf "service.sessionAffinity must be None or ClientIP, got %q" (toString .Values.service.sessionAffinity)) }}
{{- end }}
{{- $workers := include "rwrouter.workers" . | int64 }}
{{- $_ := include "rwrouter.listenPort" . }}
{{- $storage := default dict (get $cfg "storage") }}
{{- $path := toString (default "data" (get $storage "path")) }}
{{- $under := or (not (hasPrefix "/" $path)) (eq (trimSuffix "/" $path) "/var/lib/rwrouter") (hasPrefix "/var/lib/rwrouter/" $path) }}
{{- if or (not $under) (regexMatch "(^|/)\\.\\.(/|$)" $path) }}
{{- fail (printf "config.storage.path must be on the queue volume: relative (to the working directory /var/lib/rwrouter) or under /var/lib/rwrouter, without \"..\"; got %q" $path) }}
{{- end }}
{{- $shutdownMs := include "rwrouter.shutdownTimeoutMs" . | int64 }}
{{- if gt $workers 1 }}
{{- /* supervisor.py: SIGKILL to a worker KILL_GRACE (10 s) after shutdown_timeout + REQUEST_GRACE (5 s, runner.py) */}}
{{- if le (mul (int64 .Values.terminationGracePeriodSeconds) 1000) (add $shutdownMs 15000) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be larger than config.server.shutdown_timeout (%vms) + 15s with workers > 1: the supervisor waits that long (REQUEST_GRACE 5s + KILL_GRACE 10s) before it kills a worker that has not stopped, and must stop before the SIGKILL" .Values.terminationGracePeriodSeconds $shutdownMs) }}
{{- end }}
{{- else if le (mul (int64 .Values.terminationGracePeriodSeconds) 1000) $shutdownMs }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be larger than config.server.shutdown_timeout (%vms): rwrouter drains its queues that long after SIGTERM and must stop before the SIGKILL" .Values.terminationGracePeriodSeconds $shutdownMs) }}
{{- end }}
{{- $disk := get (include "rwrouter.bounds" . | fromJson) "disk" | int64 }}
{{- $volume := "" }}
{{- $what := "" }}
{{- if .Values.persistence.enabled }}
{{- $volume = toString .Values.persistence.size }}
{{- $what = "persistence.size" }}
{{- else if and .Values.emptyDir.sizeLimit (ne (toString .Values.emptyDir.sizeLimit) "auto") }}
{{- $volume = toString .Values.emptyDir.sizeLimit }}
{{- $what = "emptyDir.sizeLimit" }}
{{- end }}
{{- $volumeBytes := include "rwrouter.quantityBytes" $volume }}
{{- if and $volumeBytes (lt (int64 $volumeBytes) $disk) }}
{{- fail (printf "%s (%s) is smaller than the queues may use: %dMi = workers (%d) x the sum over destinations of queue_config.max_disk_bytes + storage.rejected_max_bytes (shadow destinations: none, they have no queue), + with workers > 1 the tables they share (2MiB, and 64MiB per 1000000 series_limit); raise it (emptyDir: \"auto\" sizes it) or lower those bounds" $what $volume (div (add $disk 1048575) 1048576) $workers) }}
{{- end }}
{{- end }}

{{/* Whether a web configuration file is given (webConfig.config or webConfig.existingSecret). */}}
{{- define "rwrouter.webConfigured" -}}
{{- if or (not (kindIs "invalid" .Values.webConfig.config)) .Values.webConfig.existingSecret }}true{{ end }}
{{- end }}

{{/* The scheme of the probes and the ServiceMonitor: HTTP or HTTPS (webConfig.scheme). */}}
{{- define "rwrouter.webScheme" -}}
{{- $scheme := toString .Values.webConfig.scheme }}
{{- if eq $scheme "auto" }}
{{- $web := .Values.webConfig.config }}
{{- ternary "HTTPS" "HTTP" (and (kindIs "map" $web) (hasKey $web "tls_server_config")) }}
{{- else }}
{{- $scheme }}
{{- end }}
{{- end }}

{{/* The kind of the probes: httpGet or tcpSocket (webConfig.probe; auto: tcpSocket when the
web configuration requires a client certificate, which the kubelet cannot present). */}}
{{- define "rwrouter.webProbe" -}}
{{- $probe := toString .Values.webConfig.probe }}
{{- if eq $probe "auto" }}
{{- $auth := dig "tls_server_config" "client_auth_type" "" (default dict .Values.webConfig.config) }}
{{- ternary "tcpSocket" "httpGet" (has (toString $auth) (list "RequireAnyClientCert" "RequireAndVerifyClientCert")) }}
{{- else }}
{{- $probe }}
{{- end }}
{{- end }}

{{/* Refuse web configuration values the chart cannot render safely. */}}
{{- define "rwrouter.validateWeb" -}}
{{- if and (not (kindIs "invalid" .Values.webConfig.config)) .Values.webConfig.existingSecret }}
{{- fail "webConfig.config and webConfig.existingSecret exclude each other: give the web configuration file inline or as an existing Secret" }}
{{- end }}
{{- if and (not (kindIs "invalid" .Values.webConfig.config)) (not (kindIs "map" .Values.webConfig.config)) }}
{{- fail "webConfig.config must be a map: the web configuration file as YAML (tls_server_config, basic_auth_users, ...)" }}
{{- end }}
{{- if not (has (toString .Values.webConfig.scheme) (list "auto" "HTTP" "HTTPS")) }}
{{- fail (printf "webConfig.scheme must be auto, HTTP or HTTPS, got %q" (toString .Values.webConfig.scheme)) }}
{{- end }}
{{- if not (has (toString .Values.webConfig.probe) (list "auto" "httpGet" "tcpSocket")) }}
{{- fail (printf "webConfig.probe must be auto, httpGet or tcpSocket, got %q" (toString .Values.webConfig.probe)) }}
{{- end }}
{{- range .Values.webConfig.secretMounts }}
{{- if or (not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (toString .name))) (eq (toString .name) "config") (not .secretName) }}
{{- fail (printf "webConfig.secretMounts: each needs a name (a DNS label other than \"config\": mounted at /etc/rwrouter-web/<name>/) and a secretName; got %v" .) }}
{{- end }}
{{- end }}
{{- if and .Values.webConfig.secretMounts (not (include "rwrouter.webConfigured" .)) }}
{{- fail "webConfig.secretMounts without webConfig.config or webConfig.existingSecret: nothing would read the mounted files" }}
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
      {{- $web := include "rwrouter.webConfigured" . }}
      {{- if or (not (kindIs "invalid" .Values.workers)) $web .Values.lifecycle }}
      args:
        {{- if not (kindIs "invalid" .Values.workers) }}
        - --workers
        - {{ include "rwrouter.workers" . | quote }}
        {{- end }}
        {{- if $web }}
        - --web.config.file
        - /etc/rwrouter-web/config/web.yml
        {{- end }}
        {{- if .Values.lifecycle }}
        - --web.enable-lifecycle
        {{- end }}
      {{- end }}
      ports:
        - name: http
          containerPort: {{ include "rwrouter.listenPort" . }}
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
      {{- $probe := include "rwrouter.webProbe" . }}
      livenessProbe:
        {{- if eq $probe "tcpSocket" }}
        tcpSocket:
          port: http
        {{- else }}
        httpGet:
          path: /-/healthy
          port: http
          scheme: {{ include "rwrouter.webScheme" . }}
        {{- end }}
        {{- toYaml .Values.livenessProbe | nindent 8 }}
      readinessProbe:
        {{- if eq $probe "tcpSocket" }}
        tcpSocket:
          port: http
        {{- else }}
        httpGet:
          path: /-/ready
          port: http
          scheme: {{ include "rwrouter.webScheme" . }}
        {{- end }}
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
        {{- if include "rwrouter.webConfigured" . }}
        - name: web-config
          mountPath: /etc/rwrouter-web/config
          readOnly: true
        {{- end }}
        {{- range .Values.webConfig.secretMounts }}
        - name: web-{{ .name }}
          mountPath: /etc/rwrouter-web/{{ .name }}
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "rwrouter.fullname" . }}
    {{- if include "rwrouter.webConfigured" . }}
    - name: web-config
      secret:
        secretName: {{ .Values.webConfig.existingSecret | default (printf "%s-web" (include "rwrouter.fullname" .)) }}
        items:
          - key: web.yml
            path: web.yml
    {{- end }}
    {{- range .Values.webConfig.secretMounts }}
    - name: web-{{ .name }}
      secret:
        secretName: {{ .secretName }}
    {{- end }}
    {{- if not .Values.persistence.enabled }}
    - name: data
      {{- with include "rwrouter.emptyDirSizeLimit" . }}
      emptyDir:
        sizeLimit: {{ . }}
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
