{{/* Names ------------------------------------------------------------------------------- */}}

{{- define "macaron.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "macaron.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "macaron.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Service the base group answers on (leaders only with a LeaderWorkerSet). */}}
{{- define "macaron.engineService" -}}{{ include "macaron.fullname" . }}-engine{{- end -}}
{{- define "macaron.routerHeadless" -}}{{ include "macaron.fullname" . }}-router-headless{{- end -}}
{{- define "macaron.redisName" -}}{{ include "macaron.fullname" . }}-redis{{- end -}}
{{- define "macaron.configName" -}}{{ include "macaron.fullname" . }}-config{{- end -}}
{{- define "macaron.serviceAccount" -}}{{ include "macaron.fullname" . }}{{- end -}}
{{- define "macaron.routerServiceAccount" -}}{{ include "macaron.fullname" . }}-router{{- end -}}
{{- define "macaron.svcDomain" -}}{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}{{- end -}}

{{/* Labels ------------------------------------------------------------------------------ */}}

{{- define "macaron.labels" -}}
helm.sh/chart: {{ include "macaron.chart" . }}
app.kubernetes.io/name: {{ include "macaron.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: macaron-serve
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "router") */}}
{{- define "macaron.selectorLabels" -}}
app.kubernetes.io/name: {{ include "macaron.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Pod labels stay the same across chart versions, so that an upgrade which does not change a
workload's pods (above all, a GPU base group that takes minutes to load) does not roll it. */}}
{{- define "macaron.podLabels" -}}
{{ include "macaron.selectorLabels" . }}
app.kubernetes.io/part-of: macaron-serve
{{- end -}}

{{- define "macaron.componentLabels" -}}
{{ include "macaron.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Images ------------------------------------------------------------------------------ */}}

{{- define "macaron.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "macaron.sglangImage" -}}
{{- printf "%s:%s" .Values.base.sglang.image.repository .Values.base.sglang.image.tag -}}
{{- end -}}

{{/* Adapters ---------------------------------------------------------------------------- */}}

{{/* The adapter reference a specialist asks the engine for: name@version, or name. */}}
{{- define "macaron.adapterRef" -}}
{{- if .version -}}{{ .name }}@{{ .version }}{{- else -}}{{ .name }}{{- end -}}
{{- end -}}

{{/* Where the base group loads an adapter from. */}}
{{- define "macaron.adapterPath" -}}
{{- if .path -}}{{ .path }}{{- else if .version -}}/adapters/{{ .name }}/{{ .version }}{{- else -}}/adapters/{{ .name }}{{- end -}}
{{- end -}}

{{/* `--lora-paths` values: one NAME=PATH per enabled specialist, in name order. */}}
{{- define "macaron.loraPaths" -}}
{{- $paths := list -}}
{{- range $key, $spec := .Values.specialists -}}
{{- if ne (toString $spec.enabled) "false" -}}
{{- $paths = append $paths (printf "%s=%s" (include "macaron.adapterRef" $spec.adapter) (include "macaron.adapterPath" $spec.adapter)) -}}
{{- end -}}
{{- end -}}
{{- toJson $paths -}}
{{- end -}}

{{/* Configuration --------------------------------------------------------------------------
The YAML configuration every service reads (MACARON_CONFIG): the sections of
macaron.config.MacaronSettings the chart wires (a test loads it with load_settings), with
.Values.config merged over them. */}}
{{- define "macaron.config" -}}
{{- $specialists := dict
  "host" "0.0.0.0"
  "grace_period_s" (int .Values.drain.gracePeriodSeconds)
  "discovery" (dict
    "mode" "dns"
    "dns_name" (printf "%s.%s" (include "macaron.engineService" .) (include "macaron.svcDomain" .))
    "dns_port" (int .Values.base.port)) -}}
{{- if include "macaron.hasTokenizer" . -}}
{{- $_ := set $specialists "tokenizer_path" "/models/tokenizer" -}}
{{- end -}}
{{- range $key, $spec := .Values.specialists -}}
{{- if ne (toString $spec.enabled) "false" -}}
{{- $_ := set $specialists $key (dict
  "adapter" $spec.adapter.name
  "adapter_version" (default nil $spec.adapter.version)
  "port" (int $spec.port)) -}}
{{- end -}}
{{- end -}}
{{- $config := dict "specialists" $specialists -}}
{{- with .Values.auth.apiKeys -}}
{{- $_ := set $config "auth" (dict "api_keys" .) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $config (deepCopy .Values.config)) -}}
{{- end -}}

{{/* Router and gateway wiring, as MACARON_<SECTION>__<FIELD> environment variables
(macaron.router.settings.RouterSettings, macaron.gateway.settings.GatewaySettings). */}}
{{- define "macaron.routerEnv" -}}
{{- $domain := include "macaron.svcDomain" . -}}
- name: MACARON_ROUTER__HOST
  value: 0.0.0.0
- name: MACARON_ROUTER__PORT
  value: {{ .Values.router.port | quote }}
- name: MACARON_ROUTER__GRACE_PERIOD_S
  value: {{ .Values.drain.gracePeriodSeconds | quote }}
- name: MACARON_ROUTER__KV_EVENTS__ENABLED
  value: {{ .Values.base.kvEvents.enabled | quote }}
{{- if .Values.base.kvEvents.enabled }}
- name: MACARON_ROUTER__KV_EVENTS__ENDPOINT
  value: {{ printf "tcp://{host}:%d" (int .Values.base.kvEvents.port) | quote }}
- name: MACARON_ROUTER__KV_EVENTS__REPLAY_ENDPOINT
  value: {{ printf "tcp://{host}:%d" (int .Values.base.kvEvents.replayPort) | quote }}
- name: MACARON_ROUTER__KV_EVENTS__TOPIC
  value: {{ .Values.base.kvEvents.topic | quote }}
- name: MACARON_ROUTER__KV_EVENTS__BLOCK_SIZE
  value: {{ .Values.base.kvEvents.pageSize | quote }}
{{- end }}
{{- range $key, $spec := .Values.specialists }}
{{- if ne (toString $spec.enabled) "false" }}
- name: MACARON_ROUTER__POOLS__{{ upper $key }}
  value: {{ list (printf "dns:///%s-%s.%s:%d" (include "macaron.fullname" $) $key $domain (int $spec.port)) | toJson | quote }}
{{- end }}
{{- end }}
{{- include "macaron.internalEnv" (dict "root" . "token" true) }}
{{- if .Values.tls.enabled }}
- name: MACARON_ROUTER__TLS__CERT_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.crt
- name: MACARON_ROUTER__TLS__KEY_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.key
- name: MACARON_ROUTER__SPECIALIST_TLS__CA_FILE
  value: {{ include "macaron.tlsDir" . }}/ca.crt
{{- if .Values.tls.mutual }}
- name: MACARON_ROUTER__SPECIALIST_TLS__CERT_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.crt
- name: MACARON_ROUTER__SPECIALIST_TLS__KEY_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.key
{{- end }}
{{- with .Values.tls.serverName }}
- name: MACARON_ROUTER__SPECIALIST_TLS__SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq .Values.router.discovery "endpointslices" }}
- name: MACARON_ROUTER__KUBERNETES__ENABLED
  value: "true"
- name: MACARON_ROUTER__KUBERNETES__SERVICE_NAME
  value: {{ include "macaron.engineService" . }}
- name: MACARON_ROUTER__KUBERNETES__NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: MACARON_ROUTER__KUBERNETES__PORT_NAME
  value: http
{{- end }}
{{- end -}}

{{- define "macaron.gatewayEnv" -}}
- name: MACARON_GATEWAY__HOST
  value: 0.0.0.0
- name: MACARON_GATEWAY__PORT
  value: {{ .Values.gateway.port | quote }}
- name: MACARON_GATEWAY__GRACE_PERIOD_S
  value: {{ .Values.drain.gracePeriodSeconds | quote }}
- name: MACARON_GATEWAY__ROUTER_TARGET
  value: dns:///{{ include "macaron.routerHeadless" . }}.{{ include "macaron.svcDomain" . }}:{{ .Values.router.port }}
{{- if .Values.tls.enabled }}
- name: MACARON_GATEWAY__ROUTER_TLS
  value: "true"
- name: MACARON_GATEWAY__ROUTER_CA_FILE
  value: {{ include "macaron.tlsDir" . }}/ca.crt
{{- with .Values.tls.serverName }}
- name: MACARON_GATEWAY__ROUTER_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Specialists: the internal token they require, the engine key they send, their TLS files. */}}
{{- define "macaron.specialistEnv" -}}
{{- include "macaron.internalEnv" (dict "root" . "token" true) }}
{{- if .Values.tls.enabled }}
- name: MACARON_SPECIALISTS__TLS__CERT_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.crt
- name: MACARON_SPECIALISTS__TLS__KEY_FILE
  value: {{ include "macaron.tlsDir" . }}/tls.key
{{- if .Values.tls.mutual }}
- name: MACARON_SPECIALISTS__TLS__CLIENT_CA_FILE
  value: {{ include "macaron.tlsDir" . }}/ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{/* Internal credentials from auth.internal.existingSecret: (dict "root" $ "token" bool).
The engine key always (every caller of the engine and the engine itself); the token when asked. */}}
{{- define "macaron.internalEnv" -}}
{{- $i := .root.Values.auth.internal }}
{{- if .token }}
- name: MACARON_AUTH__INTERNAL_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $i.existingSecret }}
      key: {{ $i.internalTokenKey }}
{{- end }}
- name: MACARON_ENGINE__API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $i.existingSecret }}
      key: {{ $i.engineApiKeyKey }}
{{- end -}}

{{- define "macaron.tlsDir" -}}/etc/macaron/tls{{- end -}}

{{- define "macaron.tlsVolume" -}}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
    defaultMode: 0440
{{- end -}}

{{- define "macaron.tlsMount" -}}
- name: tls
  mountPath: {{ include "macaron.tlsDir" . }}
  readOnly: true
{{- end -}}

{{/* API keys (hashes) from an existing Secret, for the gateway and the router. */}}
{{- define "macaron.authEnv" -}}
{{- if .Values.auth.existingSecret }}
- name: MACARON_AUTH__API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: {{ .Values.auth.secretKey }}
{{- end }}
{{- end -}}

{{/* Tokenizer files for routers and specialists ----------------------------------------- */}}

{{/* Non-empty when routers and specialists get a tokenizer mount (no mount: the image's default model). */}}
{{- define "macaron.hasTokenizer" -}}
{{- if or .Values.model.tokenizer.volume .Values.model.volume -}}true{{- end -}}
{{- end -}}

{{- define "macaron.tokenizerVolumes" -}}
{{- if .Values.model.tokenizer.volume }}
- name: tokenizer
  {{- toYaml .Values.model.tokenizer.volume | nindent 2 }}
{{- else if .Values.model.volume }}
- name: tokenizer
  emptyDir:
    sizeLimit: 512Mi
- name: model
  {{- toYaml .Values.model.volume | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "macaron.tokenizerMounts" -}}
{{- if .Values.model.tokenizer.volume }}
- name: tokenizer
  mountPath: /models/tokenizer
  readOnly: true
  {{- with .Values.model.tokenizer.subPath }}
  subPath: {{ . }}
  {{- end }}
{{- else if .Values.model.volume }}
- name: tokenizer
  mountPath: /models/tokenizer
  readOnly: true
{{- end }}
{{- end -}}

{{/* An init container that copies only the tokenizer and chat-template files out of the model
directory, so the main container never mounts the weights. */}}
{{- define "macaron.tokenizerInit" -}}
{{- if and (not .Values.model.tokenizer.volume) .Values.model.volume }}
- name: copy-tokenizer
  image: {{ include "macaron.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [/bin/sh, -ec]
  args:
    - |
      for f in {{ join " " .Values.model.tokenizer.files }}; do
        if [ -f "/models/base/$f" ]; then cp "/models/base/$f" /models/tokenizer/; echo "copied $f"; fi
      done
      if [ ! -f /models/tokenizer/tokenizer.json ] && [ ! -f /models/tokenizer/tokenizer.model ] && [ ! -f /models/tokenizer/vocab.json ]; then
        echo "no tokenizer file in the model directory (model.volume, model.subPath)" >&2; exit 1
      fi
  resources:
    requests: {cpu: 50m, memory: 64Mi}
    limits: {cpu: 500m, memory: 256Mi}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: model
      mountPath: /models/base
      readOnly: true
      {{- with .Values.model.subPath }}
      subPath: {{ . }}
      {{- end }}
    - name: tokenizer
      mountPath: /models/tokenizer
{{- end }}
{{- end -}}

{{/* Shared pieces of the Macaron pods ---------------------------------------------------- */}}

{{- define "macaron.terminationGrace" -}}
{{- add .Values.drain.preStopSleepSeconds .Values.drain.gracePeriodSeconds .Values.drain.shutdownSlackSeconds -}}
{{- end -}}

{{- define "macaron.preStop" -}}
preStop:
  exec:
    command: [sleep, {{ .Values.drain.preStopSleepSeconds | quote }}]
{{- end -}}

{{/* Environment every Macaron container gets. */}}
{{- define "macaron.commonEnv" -}}
- name: MACARON_CONFIG
  value: /etc/macaron/config.yaml
- name: HF_HUB_OFFLINE
  value: "1"
- name: TMPDIR
  value: /tmp
{{- end -}}

{{/* The Redis URL (routers and gateways only). */}}
{{- define "macaron.redisEnv" -}}
{{- if and .Values.redis.enabled .Values.redis.auth.existingSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.auth.existingSecret }}
      key: {{ .Values.redis.auth.secretKey }}
{{- end }}
- name: MACARON_REDIS_URL
{{- if .Values.redis.enabled }}
{{- if .Values.redis.auth.existingSecret }}
  value: "redis://:$(REDIS_PASSWORD)@{{ include "macaron.redisName" . }}.{{ include "macaron.svcDomain" . }}:6379/0"
{{- else }}
  value: "redis://{{ include "macaron.redisName" . }}.{{ include "macaron.svcDomain" . }}:6379/0"
{{- end }}
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-redis-url" (include "macaron.fullname" .)) .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.secretKey }}
{{- end }}
{{- /* Placement state (KV-cache index, affinity, load) on its own LRU server: never evicts sessions or limits. */}}
- name: MACARON_CACHE_REDIS_URL
{{- if .Values.redis.enabled }}
{{- if .Values.redis.auth.existingSecret }}
  value: "redis://:$(REDIS_PASSWORD)@{{ include "macaron.redisName" . }}.{{ include "macaron.svcDomain" . }}:6380/0"
{{- else }}
  value: "redis://{{ include "macaron.redisName" . }}.{{ include "macaron.svcDomain" . }}:6380/0"
{{- end }}
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-redis-url" (include "macaron.fullname" .)) .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.cacheSecretKey }}
      optional: true
{{- end }}
{{- end -}}

{{- define "macaron.configVolume" -}}
- name: config
  configMap:
    name: {{ include "macaron.configName" . }}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
{{- end -}}

{{- define "macaron.configMounts" -}}
- name: config
  mountPath: /etc/macaron
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "macaron.podAnnotations" -}}
checksum/config: {{ include "macaron.config" . | sha256sum }}
{{- end -}}

{{/* Spread a component's pods over nodes: (dict "root" $ "component" "gateway") */}}
{{- define "macaron.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "macaron.selectorLabels" . | nindent 8 }}
{{- end -}}

{{/* Base group ------------------------------------------------------------------------------ */}}

{{- define "macaron.baseTerminationGrace" -}}
{{- add .Values.base.preStopSleepSeconds .Values.drain.gracePeriodSeconds .Values.base.shutdownSlackSeconds -}}
{{- end -}}

{{- define "macaron.validate" -}}
{{- if eq .Values.base.engine "sglang" -}}
{{- if ne (int .Values.base.sglang.tensorParallelSize) (mul (int .Values.base.gpu.perNode) (int .Values.base.nodes)) -}}
{{- fail (printf "base.sglang.tensorParallelSize (%d) must equal base.gpu.perNode (%d) x base.nodes (%d)" (int .Values.base.sglang.tensorParallelSize) (int .Values.base.gpu.perNode) (int .Values.base.nodes)) -}}
{{- end -}}
{{- if not .Values.model.volume -}}
{{- fail "base.engine sglang needs model.volume (the base model's directory)" -}}
{{- end -}}
{{- if lt (int .Values.base.sglang.maxLoadedLoras) (int .Values.base.sglang.maxLorasPerBatch) -}}
{{- fail "base.sglang.maxLoadedLoras must be >= base.sglang.maxLorasPerBatch" -}}
{{- end -}}
{{- else -}}
{{- if gt (int .Values.base.nodes) 1 -}}
{{- fail "base.engine embedded runs on one node: set base.nodes to 1" -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.auth.apiKeys) (not .Values.auth.existingSecret) (not (dig "auth" "api_keys" nil .Values.config)) -}}
{{- fail "the gateway and the router listen beyond loopback, so they need API keys: set auth.apiKeys (hashes from `macaron keys create`) or auth.existingSecret" -}}
{{- end -}}
{{- if not .Values.auth.internal.existingSecret -}}
{{- fail "the router, the specialists and the engine listen beyond loopback, so they need internal credentials: set auth.internal.existingSecret (a Secret with the internal token and the engine's API key)" -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.redis.external.url) (not .Values.redis.external.existingSecret) -}}
{{- fail "redis.enabled is false: set redis.external.url or redis.external.existingSecret" -}}
{{- end -}}
{{- end -}}

{{/* gRPC probes (dict "root" $ "probes" printf-template "port" n): the kubelet's gRPC probe
cannot speak TLS, so with tls.enabled the same probes check the TCP port instead. */}}
{{- define "macaron.grpcProbes" -}}
{{- $probes := printf .probes .port .port -}}
{{- if .root.Values.tls.enabled -}}
{{- $probes = replace (printf "grpc: {port: %d}" (int .port)) "tcpSocket: {port: grpc}" $probes -}}
{{- end -}}
{{- $probes -}}
{{- end -}}
