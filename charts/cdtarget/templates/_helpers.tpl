{{/*
The chart's name, and the release's name for its objects: `cdtarget` for a release named
`cdtarget` (the names deploy/ uses), `<release>-cdtarget` otherwise.
*/}}
{{- define "cdtarget.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cdtarget.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Helm's own labels: the only ones deploy/ does not carry (the drift test removes exactly these).
*/}}
{{- define "cdtarget.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The controller's selector labels, as in deploy/ (a shard adds its name).
*/}}
{{- define "cdtarget.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cdtarget.name" . }}
app.kubernetes.io/component: controller
{{- end }}

{{/*
Labels of the chart's objects.
*/}}
{{- define "cdtarget.labels" -}}
{{ include "cdtarget.selectorLabels" . }}
{{ include "cdtarget.helmLabels" . }}
{{- end }}

{{/*
The image: repository with the digest when one is given, else with the tag (the appVersion by
default).
*/}}
{{- define "cdtarget.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the GitLab token and known_hosts.
*/}}
{{- define "cdtarget.gitlabSecret" -}}
{{- .Values.gitlab.existingSecret | default (printf "%s-gitlab" (include "cdtarget.fullname" .)) }}
{{- end }}

{{/*
The controllers to run: one per shard, or one for everything. Each: the Deployment's name, the
extra selector labels, the shard's label selector, Lease and webhook URL. Returned as YAML.
*/}}
{{- define "cdtarget.controllers" -}}
{{- $fullname := include "cdtarget.fullname" . }}
{{- $controllers := list }}
{{- range .Values.shards }}
{{- $controllers = append $controllers (dict
      "name" (printf "%s-%s" $fullname .name)
      "shard" .name
      "labels" (dict "cdtarget.io/controller-shard" .name)
      "selector" .selector
      "leaseName" (printf "%s-%s" $.Values.controller.leaderElection.leaseName .name)
      "webhookExternalURL" (.webhookExternalURL | default $.Values.gitlab.webhookExternalURL)) }}
{{- else }}
{{- $controllers = append $controllers (dict
      "name" $fullname
      "shard" ""
      "labels" dict
      "selector" ""
      "leaseName" .Values.controller.leaderElection.leaseName
      "webhookExternalURL" .Values.gitlab.webhookExternalURL) }}
{{- end }}
{{- toYaml (dict "controllers" $controllers) }}
{{- end }}

{{/*
The rules of deploy/rbac.yaml (files/rbac.yaml links to it), by kind: one place for them, the
file the least-privilege test of tests/cluster_tour checks against the audit log.
*/}}
{{- define "cdtarget.rbacRules" -}}
{{- $rules := dict }}
{{- range regexSplit "(?m)^---[ \t]*$" (.Files.Get "files/rbac.yaml") -1 }}
{{- $object := fromYaml . }}
{{- if has (get $object "kind") (list "ClusterRole" "Role") }}
{{- $_ := set $rules $object.kind $object.rules }}
{{- end }}
{{- end }}
{{- if not (and (hasKey $rules "ClusterRole") (hasKey $rules "Role")) }}
{{- fail "files/rbac.yaml (a link to deploy/rbac.yaml) holds no ClusterRole or no Role: was the chart packaged without following its links?" }}
{{- end }}
{{- toYaml $rules }}
{{- end }}
