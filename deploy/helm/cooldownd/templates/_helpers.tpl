{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "cooldownd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: <release>-<chart>, or <release> when it already contains the chart
name. Truncated to 63 characters because some Kubernetes name fields are limited to that.
*/}}
{{- define "cooldownd.fullname" -}}
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

{{/*
Name of a derived resource: the full name truncated so that "-<suffix>" still fits 63 characters.
Usage: include "cooldownd.componentName" (list . "redis")
*/}}
{{- define "cooldownd.componentName" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "cooldownd.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "cooldownd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource.
*/}}
{{- define "cooldownd.labels" -}}
helm.sh/chart: {{ include "cooldownd.chart" . }}
{{ include "cooldownd.selectorLabels" . }}
app.kubernetes.io/version: {{ include "cooldownd.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cooldownd
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of the cooldownd pods. They never change across upgrades (Deployment selectors
are immutable).
*/}}
{{- define "cooldownd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cooldownd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/*
Labels and selector labels of the bundled Redis.
*/}}
{{- define "cooldownd.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cooldownd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "cooldownd.redis.labels" -}}
helm.sh/chart: {{ include "cooldownd.chart" . }}
{{ include "cooldownd.redis.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.redis.bundled.image.tag | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cooldownd
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Name of the ServiceAccount the cooldownd pods use.
*/}}
{{- define "cooldownd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cooldownd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
cooldownd image tag: image.tag, else the chart's appVersion.
*/}}
{{- define "cooldownd.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}; the digest wins over the tag.
Usage: include "cooldownd.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion)
*/}}
{{- define "cooldownd.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (.image.tag | default .defaultTag | toString) }}
{{- end }}
{{- end }}

{{- define "cooldownd.image" -}}
{{- include "cooldownd.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{- define "cooldownd.redis.image" -}}
{{- include "cooldownd.imageRef" (dict "image" .Values.redis.bundled.image "defaultTag" "") }}
{{- end }}

{{- define "cooldownd.test.image" -}}
{{- include "cooldownd.imageRef" (dict "image" .Values.testFramework.image "defaultTag" "") }}
{{- end }}

{{/*
Names of the bundled Redis resources.
*/}}
{{- define "cooldownd.redis.fullname" -}}
{{- include "cooldownd.componentName" (list . "redis") }}
{{- end }}

{{- define "cooldownd.redis.headlessName" -}}
{{- include "cooldownd.componentName" (list . "redis-headless") }}
{{- end }}

{{/*
The chart's own Secret (tokens and salt) is rendered when one of them comes from values.
*/}}
{{- define "cooldownd.chartSecretTokens" -}}
{{- if and (not .Values.auth.insecureNoAuth) (not .Values.auth.existingSecret) (or .Values.auth.tokens .Values.auth.generateAdminToken) }}true{{ end }}
{{- end }}

{{/*
Whether the chart generates the admin token: auth on and no tokens given.
*/}}
{{- define "cooldownd.generateToken" -}}
{{- if and (not .Values.auth.insecureNoAuth) (not .Values.auth.existingSecret) (not .Values.auth.tokens) .Values.auth.generateAdminToken }}true{{ end }}
{{- end }}

{{- define "cooldownd.chartSecretSalt" -}}
{{- if and (not .Values.salt.existingSecret) .Values.salt.value }}true{{ end }}
{{- end }}

{{- define "cooldownd.tokensEnabled" -}}
{{- if and (not .Values.auth.insecureNoAuth) (or .Values.auth.existingSecret .Values.auth.tokens .Values.auth.generateAdminToken) }}true{{ end }}
{{- end }}

{{- define "cooldownd.saltEnabled" -}}
{{- if or .Values.salt.existingSecret .Values.salt.value }}true{{ end }}
{{- end }}

{{- define "cooldownd.tokensSecretName" -}}
{{- default (include "cooldownd.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{- define "cooldownd.tokensSecretKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretTokensKey }}{{ else }}tokens.yaml{{ end }}
{{- end }}

{{- define "cooldownd.saltSecretName" -}}
{{- default (include "cooldownd.fullname" .) .Values.salt.existingSecret }}
{{- end }}

{{- define "cooldownd.saltSecretKey" -}}
{{- if .Values.salt.existingSecret }}{{ .Values.salt.existingSecretKey }}{{ else }}salt{{ end }}
{{- end }}

{{/*
The Redis password Secret cooldownd mounts, if any: the bundled Redis's (existing or generated)
or the external Redis's existingSecret.
*/}}
{{- define "cooldownd.redisPasswordSecretName" -}}
{{- if .Values.redis.bundled.enabled }}
{{- default (include "cooldownd.redis.fullname" .) .Values.redis.bundled.auth.existingSecret }}
{{- else if .Values.redis.external.enabled }}
{{- .Values.redis.external.existingSecret }}
{{- end }}
{{- end }}

{{- define "cooldownd.redisPasswordSecretKey" -}}
{{- if .Values.redis.bundled.enabled }}
{{- if .Values.redis.bundled.auth.existingSecret }}{{ .Values.redis.bundled.auth.existingSecretPasswordKey }}{{ else }}redis-password{{ end }}
{{- else }}
{{- .Values.redis.external.existingSecretPasswordKey }}
{{- end }}
{{- end }}

{{/*
Whether cooldownd talks to Redis over TLS (external Redis only).
*/}}
{{- define "cooldownd.redisTLS" -}}
{{- if and .Values.redis.external.enabled (or .Values.redis.external.tls.enabled (hasPrefix "rediss://" .Values.redis.external.url)) }}true{{ end }}
{{- end }}

{{/*
coalesce.interval when it turns coalescing on (a duration above 0), else empty. Empty and 0 are off.
*/}}
{{- define "cooldownd.coalesceInterval" -}}
{{- $i := .Values.coalesce.interval }}
{{- if and (not (kindIs "invalid" $i)) (gt (include "cooldownd.durationMs" $i | float64) 0.0) }}{{ toString $i }}{{ end }}
{{- end }}

{{/*
Whether the replicas route coalesced batches to one another (decision 0064).
*/}}
{{- define "cooldownd.peerRouting" -}}
{{- if .Values.coalesce.routing.enabled }}true{{ end }}
{{- end }}

{{/*
The Secret holding the peer token: coalesce.routing.existingSecret, else the one the chart
generates (peer-secret.yaml), and the token's key in it.
*/}}
{{- define "cooldownd.peerTokenSecretName" -}}
{{- default (include "cooldownd.componentName" (list . "peer-token")) .Values.coalesce.routing.existingSecret }}
{{- end }}

{{- define "cooldownd.peerTokenSecretKey" -}}
{{- if .Values.coalesce.routing.existingSecret }}{{ .Values.coalesce.routing.secretKey }}{{ else }}peer-token{{ end }}
{{- end }}

{{/*
Scheme of cooldownd's own port.
*/}}
{{- define "cooldownd.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/*
In-cluster URL of the cooldownd Service.
*/}}
{{- define "cooldownd.url" -}}
{{- printf "%s://%s.%s.svc.%s:%d" (include "cooldownd.scheme" .) (include "cooldownd.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.service.port) }}
{{- end }}

{{/*
The --wait-replicas cooldownd runs with and where it comes from, as "<auto or a count>|<source>":
the last --wait-replicas in extraArgs (they follow the chart's flags, so they win), else
redis.external.waitReplicas.
*/}}
{{- define "cooldownd.waitReplicas" -}}
{{- $w := toString .Values.redis.external.waitReplicas }}
{{- $src := "redis.external.waitReplicas" }}
{{- $next := false }}
{{- range .Values.extraArgs }}
{{- $a := toString . }}
{{- if $next }}
{{- $w = $a }}
{{- $src = "--wait-replicas in extraArgs" }}
{{- $next = false }}
{{- else if regexMatch "^--?wait-replicas=" $a }}
{{- $w = regexReplaceAll "^--?wait-replicas=" $a "" }}
{{- $src = "--wait-replicas in extraArgs" }}
{{- else if regexMatch "^--?wait-replicas$" $a }}
{{- $next = true }}
{{- end }}
{{- end }}
{{- printf "%s|%s" $w $src }}
{{- end }}

{{/*
How many replicas a transition waits for: cooldownd's resolution of auto (decision 0050: 1 with
mode sentinel or cluster; with mode single 1 when the master has a replica, here when
redis.external.replicasPerMaster says so) or the count given. Empty when it is not a count
(cooldownd refuses it at start).
*/}}
{{- define "cooldownd.waitReplicasCount" -}}
{{- $ext := .Values.redis.external }}
{{- $w := include "cooldownd.waitReplicas" . | splitList "|" | first }}
{{- if eq $w "auto" }}
{{- if or (has $ext.mode (list "sentinel" "cluster")) (gt (int $ext.replicasPerMaster) 0) }}1{{ else }}0{{ end }}
{{- else if regexMatch "^[0-9]+$" $w }}
{{- $w }}
{{- end }}
{{- end }}

{{/*
Validate the values and fail once with every problem found. Rendered by deployment.yaml and
NOTES.txt. Each message names the values to change.
*/}}
{{- define "cooldownd.validateValues" -}}
{{- $msgs := list }}
{{- $r := .Values.redis }}
{{- $ext := $r.external }}
{{- if and $r.bundled.enabled $ext.enabled }}
{{- $msgs = append $msgs "redis: redis.bundled.enabled and redis.external.enabled are both true; enable exactly one (bundled for a trial, external for production)" }}
{{- end }}
{{- if and (not $r.bundled.enabled) (not $ext.enabled) }}
{{- $msgs = append $msgs "redis: enable redis.bundled (a trial Redis in the release) or redis.external (your Redis); replicas must share one Redis" }}
{{- end }}
{{- if $ext.enabled }}
{{- if not (has $ext.mode (list "single" "sentinel" "cluster")) }}
{{- $msgs = append $msgs (printf "redis: redis.external.mode must be single, sentinel or cluster, got %q" (toString $ext.mode)) }}
{{- end }}
{{- if eq $ext.mode "single" }}
{{- if and $ext.url $ext.addrs }}
{{- $msgs = append $msgs "redis: redis.external.mode=single takes redis.external.url or redis.external.addrs, not both" }}
{{- else if and (not $ext.url) (not $ext.addrs) }}
{{- $msgs = append $msgs "redis: redis.external.mode=single needs redis.external.url (redis://host:6379/0) or redis.external.addrs (one host:port)" }}
{{- else if gt (len $ext.addrs) 1 }}
{{- $msgs = append $msgs "redis: redis.external.mode=single takes one address in redis.external.addrs; use mode=sentinel or mode=cluster for several" }}
{{- end }}
{{- if and $ext.url (not (regexMatch "^rediss?://" $ext.url)) }}
{{- $msgs = append $msgs "redis: redis.external.url must start with redis:// or rediss://" }}
{{- end }}
{{- if regexMatch "^rediss?://[^/@]*:[^/@]*@" $ext.url }}
{{- $msgs = append $msgs "redis: redis.external.url must not contain a password; put it in the Secret named by redis.external.existingSecret" }}
{{- end }}
{{- end }}
{{- if and (has $ext.mode (list "sentinel" "cluster")) $ext.url }}
{{- $msgs = append $msgs (printf "redis: redis.external.url is for mode=single; with mode=%s list the nodes in redis.external.addrs" $ext.mode) }}
{{- end }}
{{- if and (eq $ext.mode "sentinel") (not $ext.addrs) }}
{{- $msgs = append $msgs "redis: redis.external.mode=sentinel needs redis.external.addrs (the sentinels, host:26379)" }}
{{- end }}
{{- if and (eq $ext.mode "sentinel") (not $ext.masterName) }}
{{- $msgs = append $msgs "redis: redis.external.mode=sentinel needs redis.external.masterName" }}
{{- end }}
{{- if and (eq $ext.mode "cluster") (not $ext.addrs) }}
{{- $msgs = append $msgs "redis: redis.external.mode=cluster needs redis.external.addrs (some cluster nodes, host:6379)" }}
{{- end }}
{{- if and (eq $ext.mode "cluster") (ne (int $ext.db) 0) }}
{{- $msgs = append $msgs "redis: redis.external.db must be 0 with mode=cluster (Redis Cluster has one database)" }}
{{- end }}
{{- if and (ne $ext.mode "sentinel") $ext.masterName }}
{{- $msgs = append $msgs "redis: redis.external.masterName is only for mode=sentinel" }}
{{- end }}
{{- range $ext.addrs }}
{{- if not (regexMatch "^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):[0-9]{1,5}$" (toString .)) }}
{{- $msgs = append $msgs (printf "redis: redis.external.addrs entry %q is not host:port" (toString .)) }}
{{- end }}
{{- end }}
{{- if and $ext.tls.existingCASecret (not $ext.tls.enabled) }}
{{- $msgs = append $msgs "redis: redis.external.tls.existingCASecret needs redis.external.tls.enabled=true" }}
{{- end }}
{{- /* What cooldownd waits for against the replicas the masters have (issue 28, decision 0050). */}}
{{- $wait := include "cooldownd.waitReplicas" . | splitList "|" }}
{{- $count := include "cooldownd.waitReplicasCount" . }}
{{- $rpm := int $ext.replicasPerMaster }}
{{- if and (eq (first $wait) "auto") (has $ext.mode (list "sentinel" "cluster")) (eq $rpm 0) }}
{{- $msgs = append $msgs (printf "redis: redis.external.replicasPerMaster is 0 with mode=%s: --wait-replicas auto waits for 1 replica there, so every report that moves a connection would be answered NOT_REPLICATED (applied on the master only); run replicas (two per master) and say so in redis.external.replicasPerMaster, or set redis.external.waitReplicas: 0 to replicate asynchronously" $ext.mode) }}
{{- else if and $count (gt (int $count) $rpm) }}
{{- $msgs = append $msgs (printf "redis: %s (%s) is more than redis.external.replicasPerMaster (%d): every report that moves a connection would be answered NOT_REPLICATED (applied on the master only, not on that many replicas); wait for fewer, or give the replicas your Redis runs per master" (last $wait) $count $rpm) }}
{{- end }}
{{- end }}
{{- $auth := .Values.auth }}
{{- if $auth.insecureNoAuth }}
{{- if or $auth.tokens $auth.existingSecret }}
{{- $msgs = append $msgs "auth: auth.insecureNoAuth=true contradicts auth.tokens / auth.existingSecret; remove one" }}
{{- end }}
{{- else if and (not $auth.tokens) (not $auth.existingSecret) (not $auth.generateAdminToken) }}
{{- $msgs = append $msgs "auth: give bearer tokens in auth.existingSecret (a Secret with tokens.yaml) or auth.tokens, set auth.generateAdminToken=true, or set auth.insecureNoAuth=true to serve without authentication" }}
{{- end }}
{{- if and $auth.tokens (not $auth.existingSecret) (not $auth.insecureNoAuth) }}
{{- range $i, $t := $auth.tokens }}
{{- if not $t.name }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d].name is required" $i) }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9_-]{1,64}$" (toString (default "" $t.tenant))) }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d].tenant must match [a-z0-9_-]{1,64}" $i) }}
{{- end }}
{{- if not (has (toString (default "" $t.role)) (list "client" "viewer" "admin")) }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d].role must be client, viewer or admin" $i) }}
{{- end }}
{{- if and $t.token $t.sha256 }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d]: give token or sha256, not both" $i) }}
{{- else if and (not $t.token) (not $t.sha256) }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d]: token or sha256 is required" $i) }}
{{- else if and $t.token (lt (len (toString $t.token)) 16) }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d].token must be at least 16 bytes" $i) }}
{{- else if and $t.sha256 (not (regexMatch "^[0-9a-fA-F]{64}$" (toString $t.sha256))) }}
{{- $msgs = append $msgs (printf "auth: auth.tokens[%d].sha256 must be 64 hex characters" $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.salt.value (not .Values.salt.existingSecret) }}
{{- $n := len (toString .Values.salt.value) }}
{{- if or (lt $n 16) (gt $n 1024) }}
{{- $msgs = append $msgs (printf "salt: salt.value must be 16 to 1024 bytes, got %d" $n) }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- $msgs = append $msgs "tls: tls.enabled=true needs tls.existingSecret (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and $pdb.enabled (kindIs "invalid" $pdb.minAvailable) (kindIs "invalid" $pdb.maxUnavailable) }}
{{- $msgs = append $msgs "podDisruptionBudget: set podDisruptionBudget.minAvailable or podDisruptionBudget.maxUnavailable (or disable it)" }}
{{- end }}
{{- $hpa := .Values.autoscaling }}
{{- if $hpa.enabled }}
{{- if gt (int $hpa.minReplicas) (int $hpa.maxReplicas) }}
{{- $msgs = append $msgs (printf "autoscaling: autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int $hpa.minReplicas) (int $hpa.maxReplicas)) }}
{{- end }}
{{- if and (kindIs "invalid" $hpa.targetCPUUtilizationPercentage) (kindIs "invalid" $hpa.targetMemoryUtilizationPercentage) }}
{{- $msgs = append $msgs "autoscaling: set autoscaling.targetCPUUtilizationPercentage or autoscaling.targetMemoryUtilizationPercentage" }}
{{- end }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- $msgs = append $msgs "ingress: ingress.enabled=true needs ingress.hosts" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled .Values.networkPolicy.egress.enabled $ext.enabled (not .Values.networkPolicy.egress.extraEgress) }}
{{- $msgs = append $msgs "networkPolicy: networkPolicy.egress.enabled with redis.external needs networkPolicy.egress.extraEgress to allow your Redis" }}
{{- end }}
{{- $overrides := .Values.policy.overrides }}
{{- if $overrides }}
{{- /* policies.yaml as rendered (toYaml plus the block scalar's final newline); a ConfigMap's data,
keys included, and cooldownd's policy file are each limited to 1 MiB. */}}
{{- $size := add1 (len (toYaml $overrides)) }}
{{- if gt (add $size (len "policies.yaml")) 1048576 }}
{{- $msgs = append $msgs (printf "policy: policy.overrides renders to a %d-byte policies.yaml, more than its ConfigMap can hold (1 MiB, 1048576 bytes, key included); cooldownd also reads at most 1 MiB" $size) }}
{{- end }}
{{- end }}
{{- range $line := include "cooldownd.allPolicyProblems" . | trim | splitList "\n" }}
{{- if $line }}
{{- $msgs = append $msgs (printf "policy: %s; cooldownd would refuse to start (internal/breaker Policy.Validate)" $line) }}
{{- end }}
{{- end }}
{{- /* cmd/cooldownd config.validate */}}
{{- $co := .Values.coalesce }}
{{- $coMs := include "cooldownd.durationMs" (toString (default "" $co.interval)) | float64 }}
{{- if and (gt $coMs 0.0) (or (lt $coMs 10.0) (gt $coMs 5000.0)) }}
{{- $msgs = append $msgs (printf "coalesce: coalesce.interval must be empty or 0 (off), or in [10ms, 5s] (--coalesce-interval), got %v" $co.interval) }}
{{- end }}
{{- if and $co.routing.enabled (not (include "cooldownd.coalesceInterval" .)) }}
{{- $msgs = append $msgs "coalesce: coalesce.routing.enabled needs coalesce.interval (a duration in [10ms, 5s], such as 100ms): routing carries the coalesced batches" }}
{{- end }}
{{- if and $co.routing.caSecret (not $co.routing.enabled) }}
{{- $msgs = append $msgs "coalesce: coalesce.routing.caSecret needs coalesce.routing.enabled=true" }}
{{- end }}
{{- if and $co.routing.caSecret (not .Values.tls.enabled) }}
{{- $msgs = append $msgs "coalesce: coalesce.routing.caSecret needs tls.enabled=true (the replicas call one another over HTTPS only when cooldownd serves TLS)" }}
{{- end }}
{{- $c := .Values.config }}
{{- if lt (include "cooldownd.durationMs" $c.idleTTL | float64) 60000.0 }}
{{- $msgs = append $msgs (printf "config: config.idleTTL must be at least 1m (--idle-ttl), got %v" $c.idleTTL) }}
{{- end }}
{{- if lt (include "cooldownd.durationMs" $c.tokensReloadInterval | float64) 100.0 }}
{{- $msgs = append $msgs (printf "config: config.tokensReloadInterval must be at least 100ms (--tokens-reload-interval), got %v" $c.tokensReloadInterval) }}
{{- end }}
{{- if le (include "cooldownd.durationMs" $c.shutdownTimeout | float64) 0.0 }}
{{- $msgs = append $msgs (printf "config: config.shutdownTimeout must be positive (--shutdown-timeout), got %v" $c.shutdownTimeout) }}
{{- end }}
{{- if $msgs }}
{{- printf "\n\nVALUES VALIDATION:\n  - %s\n" (join "\n  - " $msgs) | fail }}
{{- end }}
{{- end }}

{{/*
Projected-volume sources of the files cooldownd reads from Secrets (empty when none): tokens, the
Redis password and CA, the serving certificate, and with coalesce.routing the peer token and CA.
*/}}
{{- define "cooldownd.secretSources" -}}
{{- $ext := .Values.redis.external }}
{{- $redisPasswordSecret := include "cooldownd.redisPasswordSecretName" . }}
{{- if include "cooldownd.tokensEnabled" . }}
- secret:
    name: {{ include "cooldownd.tokensSecretName" . }}
    items:
      - key: {{ include "cooldownd.tokensSecretKey" . }}
        path: tokens.yaml
{{- end }}
{{- if $redisPasswordSecret }}
- secret:
    name: {{ $redisPasswordSecret }}
    items:
      - key: {{ include "cooldownd.redisPasswordSecretKey" . }}
        path: redis-password
{{- end }}
{{- if and $ext.enabled $ext.tls.existingCASecret }}
- secret:
    name: {{ $ext.tls.existingCASecret }}
    items:
      - key: {{ $ext.tls.caKey }}
        path: redis-ca.crt
{{- end }}
{{- if .Values.tls.enabled }}
- secret:
    name: {{ .Values.tls.existingSecret }}
    items:
      - key: tls.crt
        path: tls/tls.crt
      - key: tls.key
        path: tls/tls.key
{{- end }}
{{- if include "cooldownd.peerRouting" . }}
- secret:
    name: {{ include "cooldownd.peerTokenSecretName" . }}
    items:
      - key: {{ include "cooldownd.peerTokenSecretKey" . }}
        path: peer-token
{{- with .Values.coalesce.routing.caSecret }}
- secret:
    name: {{ . }}
    items:
      - key: ca.crt
        path: peer-ca.crt
{{- end }}
{{- end }}
{{- end }}

{{/*
Where cooldownd reads policy.overrides (--policy-file), inside the projected volume.
*/}}
{{- define "cooldownd.policyFilePath" -}}
/etc/cooldownd/policy/policies.yaml
{{- end }}

{{/*
The ConfigMap holding policy.overrides as policies.yaml (rendered only when overrides are set). Its
own ConfigMap, never the envFrom one, so the file does not become an environment variable.
*/}}
{{- define "cooldownd.policyConfigMapName" -}}
{{- include "cooldownd.componentName" (list . "policy") }}
{{- end }}

{{/*
Sources of the read-only projected volume at /etc/cooldownd (empty when none): the Secret files
above and, with policy.overrides, policies.yaml from the policy ConfigMap.
*/}}
{{- define "cooldownd.projectedSources" -}}
{{ include "cooldownd.secretSources" . }}
{{- if .Values.policy.overrides }}
- configMap:
    name: {{ include "cooldownd.policyConfigMapName" . }}
    items:
      - key: policies.yaml
        path: policy/policies.yaml
{{- end }}
{{- end }}

{{/*
A Go duration ("1m30s", "500ms", "0"; a 0 given with --set arrives as a number) in milliseconds,
as a float. The schema has already checked the form, so this only adds up the number-unit pairs.
*/}}
{{- define "cooldownd.durationMs" -}}
{{- $s := toString . }}
{{- $ms := 0.0 }}
{{- $units := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "μs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 }}
{{- range regexFindAll "[0-9.]+[a-zµμ]+" $s -1 }}
{{- $n := regexFind "^[0-9.]+" . | float64 }}
{{- $ms = addf $ms (mulf $n (get $units (trimPrefix (regexFind "^[0-9.]+" .) .))) }}
{{- end }}
{{- $ms }}
{{- end }}

{{/*
What cooldownd's breaker.Policy.Validate refuses (internal/breaker/policy.go) that values.schema.json
cannot say, so the chart fails at lint/template time instead of rendering pods that crash-loop. The
schema, generated from internal/breaker/knobs.go, holds every rule on one value: each knob's bounds,
a rate's or budget's basis point, the throttle's K, a positive open_base and lease_ttl, a switch's
type, max_probes per tenant only (decision 0046). Left here: a span's own maximum and whole
milliseconds (a Go duration is a sum of parts, 1h30m = 90m, which no pattern adds up), and the rules
between knobs, on every policy the server resolves (a knob's value may come from another section).
Takes a dict with "p", the policy in the policy file's snake_case keys, and "names", the display name
of each key (the value to change); returns one problem per line.
*/}}
{{- define "cooldownd.policyProblems" -}}
{{- $p := .p }}
{{- $n := .names }}
{{- $ms := dict }}
{{- range $k, $knob := include "cooldownd.policyKnobs" . | fromYaml }}
{{- if eq $knob.kind "span" }}
{{- $v := include "cooldownd.durationMs" (index $p $k) | float64 }}
{{- $_ := set $ms $k $v }}
{{- if gt $v ($knob.maxMs | float64) }}
{{ index $n $k }} must be at most {{ $knob.max }}, got {{ index $p $k }}
{{- else if ne $v (floor $v) }}
{{ index $n $k }} must be whole milliseconds, got {{ index $p $k }}
{{- end }}
{{- end }}
{{- end }}
{{- $maxWindowMs := include "cooldownd.maxWindowMs" . | float64 }}
{{- $maxWindow := include "cooldownd.maxWindow" . }}
{{- if gt (index $p "failure_rate" | float64) 0.0 }}
{{- if lt (index $p "min_calls" | float64) 1.0 }}
{{ $n.min_calls }} must be in [1, {{ include "cooldownd.maxCount" . }}] while {{ $n.failure_rate }} is on, got {{ index $p "min_calls" }}
{{- end }}
{{- if or (lt $ms.window 1.0) (gt $ms.window $maxWindowMs) }}
{{ $n.window }} must be in [1ms, {{ $maxWindow }}] while {{ $n.failure_rate }} is on, got {{ index $p "window" }}
{{- end }}
{{- end }}
{{- if and (gt $ms.open_base 0.0) (lt $ms.open_max $ms.open_base) }}
{{ $n.open_max }} ({{ index $p "open_max" }}) must be at least {{ $n.open_base }} ({{ index $p "open_base" }})
{{- end }}
{{- $fleetRules := or (gt (index $p "retry_budget" | float64) 0.0) (gt (index $p "throttle_k" | float64) 0.0) (gt (index $p "trip_quorum" | float64) 1.0) }}
{{- if and $fleetRules (or (lt $ms.fleet_window 1.0) (gt $ms.fleet_window $maxWindowMs)) }}
{{ $n.fleet_window }} must be in [1ms, {{ $maxWindow }}] while {{ $n.retry_budget }}, {{ $n.throttle_k }} or {{ $n.trip_quorum }} is on, got {{ index $p "fleet_window" }}
{{- end }}
{{- end }}

{{/*
The problems of the flags' policy (policy.*) and, with policy.overrides, of every policy the
server resolves from the file (default, each tenant, each label rule), layered as cooldownd layers
them (internal/policy): label rule over tenant over default over the flags. One per line.
*/}}
{{- define "cooldownd.allPolicyProblems" -}}
{{- $v := .Values.policy }}
{{- $base := dict }}
{{- $names := dict }}
{{- range $snake, $knob := include "cooldownd.policyKnobs" . | fromYaml }}
{{- $_ := set $base $snake (index $v $knob.value) }}
{{- $_ = set $names $snake (printf "policy.%s" $knob.value) }}
{{- end }}
{{- $seen := dict }}
{{- range $line := include "cooldownd.policyProblems" (dict "p" $base "names" $names) | trim | splitList "\n" }}
{{- if $line }}
{{- $_ := set $seen $line true }}
{{ $line }}
{{- end }}
{{- end }}
{{- $o := $v.overrides | default dict }}
{{- if $o }}
{{- $sections := list }}
{{- $layer := dict "where" "policy.overrides.default" "over" (dict "p" $base "names" $names) "set" ($o.default | default dict) }}
{{- $def := include "cooldownd.policyLayer" $layer | fromYaml }}
{{- $sections = append $sections $def }}
{{- range $tenant := keys ($o.tenants | default dict) | sortAlpha }}
{{- $sec := index $o.tenants $tenant | default dict }}
{{- $tp := include "cooldownd.policyLayer" (dict "where" (printf "policy.overrides.tenants.%s" $tenant) "over" $def "set" (omit $sec "labels")) | fromYaml }}
{{- $sections = append $sections $tp }}
{{- range $i, $rule := ($sec.labels | default list) }}
{{- $sections = append $sections (include "cooldownd.policyLayer" (dict "where" (printf "policy.overrides.tenants.%s.labels[%d]" $tenant $i) "over" $tp "set" (omit $rule "match")) | fromYaml) }}
{{- end }}
{{- end }}
{{- range $sections }}
{{- $where := .where }}
{{- range $line := include "cooldownd.policyProblems" . | trim | splitList "\n" }}
{{- if and $line (not (hasKey $seen $line)) }}
{{- $_ := set $seen $line true }}
{{ $line }} (in the policy the server resolves for {{ $where }})
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
One layer of the policy file over the layer below: {"where", "over": {p, names}, "set": knobs}.
Returns {p, names, where} as YAML; names say where each value comes from.
*/}}
{{- define "cooldownd.policyLayer" -}}
{{- $p := deepCopy .over.p }}
{{- $names := deepCopy .over.names }}
{{- range $k, $v := .set }}
{{- $_ := set $p $k $v }}
{{- $_ = set $names $k (printf "%s.%s" $.where $k) }}
{{- end }}
{{- toYaml (dict "p" $p "names" $names "where" .where) }}
{{- end }}

{{/*
A Kubernetes memory quantity ("256Mi", "1G", "536870912", "1.5Gi") in bytes, as a float.
*/}}
{{- define "cooldownd.memoryBytes" -}}
{{- $s := toString . }}
{{- $num := regexFind "^[0-9.]+" $s | float64 }}
{{- $suffix := trimPrefix (regexFind "^[0-9.]+" $s) $s }}
{{- $f := get (dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0) $suffix }}
{{- if not $f }}
{{- fail (printf "\n\nVALUES VALIDATION:\n  - resources: resources.limits.memory %q is not a memory quantity the chart can read (use a number of bytes or a k, M, G, T, Ki, Mi, Gi or Ti suffix)\n" $s) }}
{{- end }}
{{- mulf $num $f }}
{{- end }}

{{/*
GOMEMLIMIT: 90 % of the container's memory limit, in whole bytes, so the Go runtime collects harder
before the kernel's OOM killer is reached (the remaining 10 % covers non-heap memory).
*/}}
{{- define "cooldownd.gomemlimit" -}}
{{- include "cooldownd.memoryBytes" . | float64 | mulf 0.9 | floor | int64 }}
{{- end }}

{{- /* policy-knobs:begin: generated from internal/breaker by go run ./tools/knobdoc (make generate); do not edit */}}
{{/*
The policy knobs (internal/breaker/knobs.go), in YAML: each policy-file key with its chart value
(policy.<value>) and its kind (count, ratio, span, switch); a span's own maximum in ms (maxMs) and
as written (max).
*/}}
{{- define "cooldownd.policyKnobs" -}}
consecutive_failures: {value: consecutiveFailures, kind: count}
failure_rate: {value: failureRate, kind: ratio}
min_calls: {value: minCalls, kind: count}
window: {value: window, kind: span, maxMs: 604800000, max: 168h}
open_base: {value: openBase, kind: span, maxMs: 604800000, max: 168h}
open_max: {value: openMax, kind: span, maxMs: 604800000, max: 168h}
jitter: {value: jitter, kind: ratio}
rate_limit_cooldown: {value: rateLimitCooldown, kind: span, maxMs: 604800000, max: 168h}
overload_floor: {value: overloadFloor, kind: span, maxMs: 604800000, max: 168h}
quota_block: {value: quotaBlock, kind: span, maxMs: 604800000, max: 168h}
auth_block: {value: authBlock, kind: span, maxMs: 604800000, max: 168h}
max_probes: {value: maxProbes, kind: count}
lease_ttl: {value: leaseTTL, kind: span, maxMs: 604800000, max: 168h}
retry_budget: {value: retryBudget, kind: ratio}
retry_budget_min: {value: retryBudgetMin, kind: count}
throttle_k: {value: throttleK, kind: ratio}
trip_quorum: {value: tripQuorum, kind: count}
fleet_window: {value: fleetWindow, kind: span, maxMs: 604800000, max: 168h}
shadow: {value: shadow, kind: switch}
lease_ttl_max: {value: leaseTTLMax, kind: span, maxMs: 86400000, max: 24h}
{{- end }}

{{/*
The breaker's limits (internal/breaker/policy.go) the rules between knobs name: MaxWindow (in ms and
as written) and MaxCount.
*/}}
{{- define "cooldownd.maxWindowMs" -}}
600000
{{- end }}
{{- define "cooldownd.maxWindow" -}}
10m
{{- end }}
{{- define "cooldownd.maxCount" -}}
100000
{{- end }}
{{- /* policy-knobs:end */}}
