{{/* Chart name, trimmed to the 63 characters of a label value. */}}
{{- define "tileops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart's. */}}
{{- define "tileops.fullname" -}}
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
An object name "<fullname>-<kind>-<sku>" within `max` characters. Kubernetes
allows 52 for a CronJob (its Jobs append 11) and 63 for a Job; when the plain
name is longer, it is cut and given 8 characters of its own hash, so two long
SKU names never collide after cutting.
Call: include "tileops.objectName" (dict "root" $ "kind" "bench" "sku" $sku "max" 52 ["suffix" "x"])
*/}}
{{- define "tileops.objectName" -}}
{{- $full := printf "%s-%s-%s" (include "tileops.fullname" .root) .kind .sku.name }}
{{- with .suffix }}{{ $full = printf "%s-%s" $full . }}{{ end }}
{{- if le (len $full) (int .max) }}
{{- $full }}
{{- else }}
{{- printf "%s-%s" ($full | trunc (sub (int .max) 9 | int) | trimSuffix "-") ($full | sha256sum | trunc 8) }}
{{- end }}
{{- end }}

{{- define "tileops.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tileops.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tileops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tileops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tileops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tileops.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tileops.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Fail on SKU names used twice: the schema cannot say "unique by name". */}}
{{- define "tileops.checkSkus" -}}
{{- $seen := dict }}
{{- range .Values.skus }}
{{- if hasKey $seen .name }}
{{- fail (printf "values.skus: the name %q appears twice; each SKU needs its own name (it names the CronJob and Job)" .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- end }}

{{/*
The benchmark pod of one SKU: an init container calibrating the node's GPUs when their stored
calibration is missing or older than calibration.maxAge, then the benchmark itself.
Both containers request the same nvidia.com/gpu count: Kubernetes' device manager hands the
GPUs of an init container on to the pod's containers, so the devices calibrated are the ones benchmarked.
Call: include "tileops.podSpec" (dict "root" $ "sku" $sku "args" (list ...))
*/}}
{{- define "tileops.podSpec" -}}
{{- $root := .root }}
{{- $sku := .sku }}
{{- $v := .root.Values -}}
{{- $allowShared := $v.allowSharedGPUs }}
{{- if hasKey $sku "allowSharedGPUs" }}{{ $allowShared = $sku.allowSharedGPUs }}{{- end -}}
serviceAccountName: {{ include "tileops.serviceAccountName" $root }}
automountServiceAccountToken: {{ $v.serviceAccount.automount }}
restartPolicy: Never
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
nodeSelector:
  {{- toYaml (merge (dict "nvidia.com/gpu.product" $sku.product) $v.nodeSelector) | nindent 2 }}
{{- if not $allowShared }}
# Whole, unshared GPUs only: no time-slicing or MPS (GPU Feature Discovery labels).
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: nvidia.com/gpu.sharing-strategy, operator: NotIn, values: [time-slicing, mps]}
            - {key: nvidia.com/gpu.replicas, operator: DoesNotExist}
        - matchExpressions:
            - {key: nvidia.com/gpu.sharing-strategy, operator: NotIn, values: [time-slicing, mps]}
            - {key: nvidia.com/gpu.replicas, operator: In, values: ["1"]}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.calibration.enabled }}
initContainers:
  {{- $cal := concat (list "calibrate" "--all-devices" "--max-age" $v.calibration.maxAge) $v.calibration.args }}
  {{- include "tileops.container" (dict "root" $root "sku" $sku "name" "calibrate" "args" $cal) | nindent 2 }}
{{- end }}
containers:
  {{- include "tileops.container" (dict "root" $root "sku" $sku "name" "tileops" "args" .args) | nindent 2 }}
volumes:
  {{- range $vol := list "results" "profiles" }}
  {{- $p := index $v.persistence $vol }}
  - name: {{ $vol }}
    {{- if $v.persistence.enabled }}
    persistentVolumeClaim:
      claimName: {{ $p.existingClaim | default (printf "%s-%s" (include "tileops.fullname" $root) $vol) }}
    {{- else }}
    emptyDir: {}
    {{- end }}
  {{- end }}
  - name: tmp
    emptyDir: {}
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $v.shmSize }}
{{- end }}

{{/*
One TileOps container of a SKU's pod (a list item). Results go to a folder per node on the
results volume (subPathExpr $(NODE_NAME)), so runs of many hosts share one claim without mixing,
and `tileops serve` over the claim finds them as DIR/<host>/<run-id>/.
Call: include "tileops.container" (dict "root" $ "sku" $sku "name" "tileops" "args" (list ...))
*/}}
{{- define "tileops.container" -}}
{{- $v := .root.Values -}}
- name: {{ .name }}
  image: {{ include "tileops.image" .root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  env:
    - name: TILEOPS_PROFILE_DIR
      value: /data/profiles
    - name: TILEOPS_SKU
      value: {{ .sku.name | quote }}
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    {{- with .sku.dramBandwidth }}
    - name: TILEOPS_DRAM_BANDWIDTH
      value: {{ . | quote }}
    {{- end }}
  {{- $res := deepCopy $v.resources }}
  {{- $_ := set $res "limits" (merge (dict "nvidia.com/gpu" (int .sku.gpus)) ($res.limits | default dict)) }}
  resources:
    {{- toYaml $res | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - {name: results, mountPath: /data/results, subPathExpr: $(NODE_NAME)}
    - {name: profiles, mountPath: /data/profiles}
    - {name: tmp, mountPath: /tmp}
    - {name: dshm, mountPath: /dev/shm}
{{- end }}
