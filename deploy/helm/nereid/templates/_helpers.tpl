{{- define "nereid.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nereid.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nereid.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nereid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nereid.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "nereid.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "nereid.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nereid.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The number of nvidia.com/gpu the pod requests or is limited to (0 when none). */}}
{{- define "nereid.gpuCount" -}}
{{- $r := .Values.resources | default dict -}}
{{- $limits := get $r "limits" | default dict -}}
{{- $requests := get $r "requests" | default dict -}}
{{- max (int (get $limits "nvidia.com/gpu" | default 0)) (int (get $requests "nvidia.com/gpu" | default 0)) -}}
{{- end -}}

{{/* A Triton release tag (YY.MM-py3...) names an API version, not one of our images. */}}
{{- define "nereid.tritonTag" -}}
{{- if regexMatch "^[0-9]{2}\\.[0-9]{2}(-py3.*)?$" (toString .Values.image.tag) -}}true{{- end -}}
{{- end -}}

{{- define "nereid.flavor" -}}
{{- $gpus := int (include "nereid.gpuCount" .) -}}
{{- $flavor := .Values.image.flavor -}}
{{- if and (eq $flavor "cpu") (gt $gpus 0) -}}
{{- fail (printf "image.flavor is \"cpu\" but resources ask for nvidia.com/gpu: %d; the CPU image cannot use a GPU: set image.flavor to auto or cuda, or drop the GPU from resources" $gpus) -}}
{{- end -}}
{{- if eq $flavor "auto" -}}{{ ternary "cuda" "cpu" (gt $gpus 0) }}{{- else -}}{{ $flavor }}{{- end -}}
{{- end -}}

{{- define "nereid.image" -}}
{{- $tag := .Values.image.tag | toString -}}
{{- if or (eq $tag "") (include "nereid.tritonTag" .) -}}{{- $tag = .Chart.AppVersion -}}{{- end -}}
{{- if eq (include "nereid.flavor" .) "cuda" -}}{{- $tag = printf "%s%s" $tag .Values.image.cudaTagSuffix -}}{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "nereid.terminationGracePeriodSeconds" -}}
{{- $drain := add (int .Values.exitTimeoutSecs) (int .Values.preStopSleepSeconds) -}}
{{- $given := .Values.terminationGracePeriodSeconds | toString -}}
{{- if eq $given "" -}}
{{- add $drain 15 -}}
{{- else if le (int $given) $drain -}}
{{- fail (printf "terminationGracePeriodSeconds (%s) must be greater than exitTimeoutSecs + preStopSleepSeconds (%d), or the kubelet kills the server before in-flight requests finish" $given $drain) -}}
{{- else -}}
{{- int $given -}}
{{- end -}}
{{- end -}}

{{/* Flags the chart derives from values; passing them in extraArgs as well would contradict the chart. */}}
{{- define "nereid.checkExtraArgs" -}}
{{- $owned := dict "--model-repository" "modelRepositoryPath" "--model-store" "modelRepositoryPath" "--http-port" "ports.http" "--grpc-port" "ports.grpc" "--metrics-port" "ports.metrics" "--exit-timeout-secs" "exitTimeoutSecs" "--grpc-max-connection-age" "grpc.maxConnectionAgeMs" "--grpc-max-connection-age-grace" "grpc.maxConnectionAgeGraceMs" "--auth-keys" "auth.keysSecret" "--auth-failure-limit" "auth.failureLimit" -}}
{{- range $i, $arg := .Values.extraArgs -}}
{{- $flag := regexReplaceAll "=.*$" (toString $arg) "" -}}
{{- if hasKey $owned $flag -}}
{{- fail (printf "extraArgs[%d] (%s): the chart sets %s from %s; set that value instead" $i $arg $flag (get $owned $flag)) -}}
{{- end -}}
{{- if not (hasPrefix "--" (toString $arg)) -}}
{{- fail (printf "extraArgs[%d] (%s) is not a flag: tritonserver flags look like --name=value" $i $arg) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nereid.checkAutoscaling" -}}
{{- $a := .Values.autoscaling -}}
{{- if and $a.enabled .Values.keda.enabled -}}
{{- fail "autoscaling.enabled and keda.enabled are both true: KEDA creates its own HorizontalPodAutoscaler, enable only one" -}}
{{- end -}}
{{- if $a.enabled -}}
{{- if not $a.metrics -}}
{{- fail "autoscaling.enabled is true but autoscaling.metrics is empty: give the HorizontalPodAutoscaler at least one metric" -}}
{{- end -}}
{{- if lt (int $a.maxReplicas) (int $a.minReplicas) -}}
{{- fail (printf "autoscaling.maxReplicas (%d) is less than autoscaling.minReplicas (%d)" (int $a.maxReplicas) (int $a.minReplicas)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.keda.enabled -}}
{{- if lt (int .Values.keda.maxReplicaCount) (int .Values.keda.minReplicaCount) -}}
{{- fail (printf "keda.maxReplicaCount (%d) is less than keda.minReplicaCount (%d)" (int .Values.keda.maxReplicaCount) (int .Values.keda.minReplicaCount)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
