{{/*
Whether /metrics has a listener of its own (--metrics-addr): whenever auth is on, since cooldownd
then refuses /metrics on its API port (the metrics name every tenant; decision 0044).
*/}}
{{- define "cooldownd.metricsSeparate" -}}
{{- if include "cooldownd.tokensEnabled" . }}true{{ end }}
{{- end }}

{{/*
Name of the metrics Service: <fullname>-metrics, within 63 characters.
*/}}
{{- define "cooldownd.metricsServiceName" -}}
{{- include "cooldownd.componentName" (list . "metrics") }}
{{- end }}

{{/*
The container port /metrics is scraped on: metrics (its own listener) or http.
*/}}
{{- define "cooldownd.metricsPortName" -}}
{{- if include "cooldownd.metricsSeparate" . }}metrics{{ else }}http{{ end }}
{{- end }}

{{/*
The scheme of the /metrics scrape: the metrics listener is plain HTTP; on the API port it is the
API's scheme.
*/}}
{{- define "cooldownd.metricsScheme" -}}
{{- if include "cooldownd.metricsSeparate" . }}http{{ else }}{{ include "cooldownd.scheme" . }}{{ end }}
{{- end }}

{{/*
metrics.port, checked: an integer port that is not containerPort.
*/}}
{{- define "cooldownd.metricsPort" -}}
{{- $p := int .Values.metrics.port }}
{{- if or (lt $p 1) (gt $p 65535) }}
{{- fail (printf "metrics: metrics.port must be in [1, 65535], got %v" .Values.metrics.port) }}
{{- end }}
{{- if eq $p (int .Values.containerPort) }}
{{- fail (printf "metrics: metrics.port (%d) must differ from containerPort (--metrics-addr must differ from --addr)" $p) }}
{{- end }}
{{- $p }}
{{- end }}

{{/*
Labels of the metrics Service: the chart's, as component metrics (the pods and the API Service are
component server).
*/}}
{{- define "cooldownd.metricsLabels" -}}
{{- $l := include "cooldownd.labels" . | fromYaml }}
{{- $_ := set $l "app.kubernetes.io/component" "metrics" }}
{{- toYaml $l }}
{{- end }}

{{/*
What the ServiceMonitor selects: the metrics Service when /metrics has a port of its own, else the
API Service.
*/}}
{{- define "cooldownd.metricsSelectorLabels" -}}
{{- $l := include "cooldownd.selectorLabels" . | fromYaml }}
{{- if include "cooldownd.metricsSeparate" . }}
{{- $_ := set $l "app.kubernetes.io/component" "metrics" }}
{{- end }}
{{- toYaml $l }}
{{- end }}
