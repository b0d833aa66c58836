{{/*
The base-weight pod group's pod template: (dict "root" $ "role" "single|leader|worker").
`single` is one node (StatefulSet); `leader`/`worker` are the pods of a LeaderWorkerSet group
(SGLang multi-node: rank 0 serves HTTP, other ranks join through --dist-init-addr).
*/}}
{{- define "macaron.baseArgs" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $s := $v.base.sglang -}}
{{- $args := list
  "--model-path" "/models/base"
  "--served-model-name" $v.model.servedModelName
  "--host" "0.0.0.0"
  "--port" (toString $v.base.port)
  "--tp-size" (toString $s.tensorParallelSize)
  "--mem-fraction-static" (toString $s.memFractionStatic)
  "--enable-lora"
  "--lora-paths" -}}
{{- $args = concat $args (fromJsonArray (include "macaron.loraPaths" $root)) -}}
{{- $args = concat $args (list
  "--max-loras-per-batch" (toString $s.maxLorasPerBatch)
  "--max-loaded-loras" (toString $s.maxLoadedLoras)
  "--max-lora-rank" (toString $s.maxLoraRank)
  "--lora-target-modules") $s.loraTargetModules -}}
{{- if $s.contextLength -}}
{{- $args = concat $args (list "--context-length" (toString $s.contextLength)) -}}
{{- end -}}
{{- $args = concat $args (list "--max-queued-requests" (toString $s.maxQueuedRequests)) -}}
{{- if $s.constrainedJsonDisableAnyWhitespace -}}
{{- $args = append $args "--constrained-json-disable-any-whitespace" -}}
{{- end -}}
{{- if $s.incrementalStreamingOutput -}}
{{- $args = append $args "--incremental-streaming-output" -}}
{{- end -}}
{{- /* The key comes from the environment (a Secret), expanded by the kubelet: never in the pod spec. */ -}}
{{- $args = concat $args (list "--api-key" "$(MACARON_ENGINE__API_KEY)") -}}
{{- $args = append $args "--enable-metrics" -}}
{{- if $v.base.kvEvents.enabled -}}
{{- /* KV-cache events for the routers' index (SGLang's publisher: PUB bound on every address of the pod). */ -}}
{{- $args = concat $args (list "--kv-events-config" (include "macaron.kvEventsConfig" $root) "--page-size" (toString $v.base.kvEvents.pageSize)) -}}
{{- end -}}
{{- if ne .role "single" -}}
{{- $args = concat $args (list
  "--nnodes" (toString $v.base.nodes)
  "--node-rank" "$(LWS_WORKER_INDEX)"
  "--dist-init-addr" (printf "$(LWS_LEADER_ADDRESS):%d" (int $s.distInitPort))) -}}
{{- end -}}
{{- $args = concat $args $s.extraArgs -}}
{{- toYaml $args -}}
{{- end -}}

{{- define "macaron.kvEventsConfig" -}}
{{- $k := .Values.base.kvEvents -}}
{{- dict "publisher" "zmq" "endpoint" (printf "tcp://*:%d" (int $k.port)) "replay_endpoint" (printf "tcp://*:%d" (int $k.replayPort)) "buffer_steps" (int $k.bufferSteps) "topic" $k.topic | toJson -}}
{{- end -}}

{{- define "macaron.embeddedArgs" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- /* engine.api_key comes from MACARON_ENGINE__API_KEY (a Secret); without it the engine refuses 0.0.0.0. */ -}}
{{- $args := list "engine" "--host" "0.0.0.0" "--port" (toString $v.base.port) "--incremental-streaming-output" -}}
{{- if $v.model.volume -}}
{{- $args = concat $args (list "--model-path" "/models/base" "--served-model-name" $v.model.servedModelName "--lora-paths") (fromJsonArray (include "macaron.loraPaths" $root)) -}}
{{- end -}}
{{- if $v.base.kvEvents.enabled -}}
{{- $args = concat $args (list "--kv-events-config" (include "macaron.kvEventsConfig" $root) "--kv-block-size" (toString $v.base.kvEvents.pageSize)) -}}
{{- end -}}
{{- $args = concat $args $v.base.embedded.extraArgs -}}
{{- toYaml $args -}}
{{- end -}}

{{- define "macaron.basePod" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $b := $v.base -}}
{{- $sglang := eq $b.engine "sglang" -}}
metadata:
  labels:
    {{- include "macaron.podLabels" (dict "root" $root "component" "base") | nindent 4 }}
    macaron-serve/base-role: {{ .role }}
    {{- with $b.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- /* Only the embedded engine reads the ConfigMap: a configuration change must not
  restart (and reload) a GPU base group. */}}
  {{- $annotations := deepCopy (default (dict) $b.podAnnotations) -}}
  {{- if not $sglang }}
  {{- $_ := set $annotations "checksum/config" (include "macaron.config" $root | sha256sum) -}}
  {{- end }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "macaron.serviceAccount" $root }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ include "macaron.baseTerminationGrace" $root }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml (ternary $b.podSecurityContext $v.podSecurityContext $sglang) | nindent 4 }}
  containers:
    - name: engine
      {{- if $sglang }}
      image: {{ include "macaron.sglangImage" $root }}
      imagePullPolicy: {{ $b.sglang.image.pullPolicy }}
      command: [python3, -m, sglang.launch_server]
      args:
        {{- include "macaron.baseArgs" . | nindent 8 }}
      {{- else }}
      image: {{ include "macaron.image" $root }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      command: [macaron]
      args:
        {{- include "macaron.embeddedArgs" . | nindent 8 }}
      {{- end }}
      env:
        - name: HF_HUB_OFFLINE
          value: "1"
        - name: TRANSFORMERS_OFFLINE
          value: "1"
        {{- include "macaron.internalEnv" (dict "root" $root "token" false) | nindent 8 }}
        {{- if $sglang }}
        # /health must stay cheap: liveness uses it, readiness uses /health_generate.
        - name: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION
          value: "false"
        {{- else }}
        - name: MACARON_CONFIG
          value: /etc/macaron/config.yaml
        - name: TMPDIR
          value: /tmp
        {{- end }}
        {{- with $b.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ $b.port }}
          protocol: TCP
        {{- if and $b.kvEvents.enabled (ne .role "worker") }}
        - name: kv-events
          containerPort: {{ $b.kvEvents.port }}
          protocol: TCP
        - name: kv-replay
          containerPort: {{ $b.kvEvents.replayPort }}
          protocol: TCP
        {{- end }}
        {{- if eq .role "leader" }}
        - name: dist-init
          containerPort: {{ $b.sglang.distInitPort }}
          protocol: TCP
        {{- end }}
      {{- if eq .role "worker" }}
      # Ranks > 0 serve only a stub /health once their schedulers are up.
      startupProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: {{ $b.startupProbe.periodSeconds }}
        failureThreshold: {{ $b.startupProbe.failureThreshold }}
      readinessProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: {{ $b.readinessProbe.periodSeconds }}
        timeoutSeconds: {{ $b.livenessProbe.timeoutSeconds }}
        failureThreshold: {{ $b.readinessProbe.failureThreshold }}
      {{- else }}
      startupProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: {{ $b.startupProbe.periodSeconds }}
        failureThreshold: {{ $b.startupProbe.failureThreshold }}
      readinessProbe:
        httpGet: {path: /health_generate, port: http}
        periodSeconds: {{ $b.readinessProbe.periodSeconds }}
        timeoutSeconds: {{ $b.readinessProbe.timeoutSeconds }}
        failureThreshold: {{ $b.readinessProbe.failureThreshold }}
      {{- end }}
      livenessProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: {{ $b.livenessProbe.periodSeconds }}
        timeoutSeconds: {{ $b.livenessProbe.timeoutSeconds }}
        failureThreshold: {{ $b.livenessProbe.failureThreshold }}
      lifecycle:
        preStop:
          exec:
            command: [sleep, {{ $b.preStopSleepSeconds | quote }}]
      resources:
        requests:
          {{- with $b.resources.requests }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
          {{- if gt (int $b.gpu.perNode) 0 }}
          {{ $b.gpu.resourceName }}: {{ $b.gpu.perNode }}
          {{- end }}
        limits:
          {{- with $b.resources.limits }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
          {{- if gt (int $b.gpu.perNode) 0 }}
          {{ $b.gpu.resourceName }}: {{ $b.gpu.perNode }}
          {{- end }}
      securityContext:
        {{- toYaml (ternary $b.securityContext $v.securityContext $sglang) | nindent 8 }}
      volumeMounts:
        {{- if $v.model.volume }}
        - name: model
          mountPath: /models/base
          readOnly: true
          {{- with $v.model.subPath }}
          subPath: {{ . }}
          {{- end }}
        {{- end }}
        {{- if $v.adapters.volume }}
        - name: adapters
          mountPath: /adapters
          readOnly: true
          {{- with $v.adapters.subPath }}
          subPath: {{ . }}
          {{- end }}
        {{- end }}
        - name: dshm
          mountPath: /dev/shm
        {{- if not $sglang }}
        - name: config
          mountPath: /etc/macaron
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- end }}
  volumes:
    {{- if $v.model.volume }}
    - name: model
      {{- toYaml $v.model.volume | nindent 6 }}
    {{- end }}
    {{- if $v.adapters.volume }}
    - name: adapters
      {{- toYaml $v.adapters.volume | nindent 6 }}
    {{- end }}
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $b.shmSizeLimit }}
    {{- if not $sglang }}
    - name: config
      configMap:
        name: {{ include "macaron.configName" $root }}
    - name: tmp
      emptyDir:
        sizeLimit: 1Gi
    {{- end }}
  {{- with $b.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $b.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $b.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
