{{/*
Names and labels shared by the templates.
*/}}

{{/* The release's full name: RELEASE-servefleet, or RELEASE when it holds "servefleet". */}}
{{- define "servefleet.fullname" -}}
{{- if contains "servefleet" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-servefleet" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "servefleet.selectorLabels" -}}
app.kubernetes.io/name: servefleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "servefleet.labels" -}}
{{ include "servefleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "servefleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{- define "servefleet.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "servefleet.fullname" .) -}}
{{- end -}}

{{/*
The environment variable Kubernetes gives every container for a Service of
the namespace that existed when it started (SERVICE_HOST): how controllers
find etcd and proxies find the controllers without cluster DNS.
*/}}
{{- define "servefleet.serviceHostVar" -}}
{{- printf "%s_SERVICE_HOST" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/* The controllers' --store: the chart's etcd Service, or the external endpoints. */}}
{{- define "servefleet.store" -}}
{{- if .Values.etcd.external.endpoints -}}
{{- printf "etcd://%s" (join "," .Values.etcd.external.endpoints) -}}
{{- else -}}
{{- printf "etcd://$(%s):2379" (include "servefleet.serviceHostVar" (printf "%s-etcd" (include "servefleet.fullname" .))) -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the cluster's certificates (tls.enabled): yours, or the certs Job's. */}}
{{- define "servefleet.certsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-certs" (include "servefleet.fullname" .)) -}}
{{- end -}}

{{/* Where controllers and proxies find their certificate files. */}}
{{- define "servefleet.certsDir" -}}
/etc/servefleet/certs
{{- end -}}
