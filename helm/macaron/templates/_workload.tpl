{{/*
One Macaron service Deployment (gateway, router, a specialist). Parameters:
  root       the chart context ($)
  component  gateway | router | specialist
  name       object name
  labels     extra pod/selector labels (dict)
  spec       the component's values (replicas, autoscaling, resources, scheduling, extraEnv)
  args       `macaron` arguments (list)
  env        extra environment (list of EnvVar dicts)
  ports      container ports (list of ContainerPort dicts)
  probes     startupProbe/readinessProbe/livenessProbe as YAML
  serviceAccount, automountToken, tokenizer (bool: mount the tokenizer files), redis (bool: MACARON_REDIS_URL and API keys: the gateway and the router)
  tls        bool: mount the gRPC TLS Secret (when tls.enabled)
*/}}
{{- define "macaron.serviceDeployment" -}}
{{- $root := .root -}}
{{- $selector := merge (fromYaml (include "macaron.selectorLabels" (dict "root" $root "component" .component))) .labels -}}
{{- $labels := merge (dict) $selector (fromYaml (include "macaron.labels" $root)) -}}
{{- $podLabels := merge (dict) $selector (fromYaml (include "macaron.podLabels" (dict "root" $root "component" .component))) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
spec:
  {{- if not .spec.autoscaling.enabled }}
  replicas: {{ .spec.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- toYaml $podLabels | nindent 8 }}
      annotations:
        {{- include "macaron.podAnnotations" $root | nindent 8 }}
        {{- with .spec.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ .serviceAccount }}
      automountServiceAccountToken: {{ .automountToken }}
      terminationGracePeriodSeconds: {{ include "macaron.terminationGrace" $root }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- with and .tokenizer (include "macaron.tokenizerInit" $root | trim) }}
      initContainers:
        {{- . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "macaron.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: [macaron]
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "macaron.commonEnv" $root | nindent 12 }}
            {{- if .redis }}
            {{- include "macaron.redisEnv" $root | trim | nindent 12 }}
            {{- with include "macaron.authEnv" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with .spec.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- toYaml .ports | nindent 12 }}
          {{- .probes | nindent 10 }}
          lifecycle:
            {{- include "macaron.preStop" $root | nindent 12 }}
          resources:
            {{- toYaml .spec.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "macaron.configMounts" $root | nindent 12 }}
            {{- with and .tokenizer (include "macaron.tokenizerMounts" $root | trim) }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- if and .tls $root.Values.tls.enabled }}
            {{- include "macaron.tlsMount" $root | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "macaron.configVolume" $root | nindent 8 }}
        {{- with and .tokenizer (include "macaron.tokenizerVolumes" $root | trim) }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- if and .tls $root.Values.tls.enabled }}
        {{- include "macaron.tlsVolume" $root | nindent 8 }}
        {{- end }}
      {{- include "macaron.spread" (dict "root" $root "component" .component) | nindent 6 }}
      {{- with .spec.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .spec.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .spec.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* HorizontalPodAutoscaler on CPU: (dict "root" $ "component" c "name" n "spec" values) */}}
{{- define "macaron.hpa" -}}
{{- if .spec.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "macaron.componentLabels" . | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .name }}
  minReplicas: {{ .spec.autoscaling.minReplicas }}
  maxReplicas: {{ .spec.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .spec.autoscaling.targetCPUUtilizationPercentage }}
  behavior:
    scaleDown:
      # Scale in slowly: each removed pod drains its streams first.
      stabilizationWindowSeconds: 300
      policies:
        - type: Pods
          value: 1
          periodSeconds: 60
{{- end }}
{{- end -}}

{{/* PodDisruptionBudget: (dict "root" $ "component" c "name" n "pdb" values "labels" extra) */}}
{{- define "macaron.pdb" -}}
{{- if .pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "macaron.componentLabels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "macaron.selectorLabels" . | nindent 6 }}
      {{- with .labels }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* Ingress: (dict "root" $ "component" c "name" n "ingress" values "service" svc "port" portName) */}}
{{- define "macaron.ingress" -}}
{{- if .ingress.enabled }}
{{- $svc := .service -}}
{{- $port := .port -}}
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "macaron.componentLabels" . | nindent 4 }}
  {{- with .ingress.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with .ingress.className }}
  ingressClassName: {{ . }}
  {{- end }}
  {{- with .ingress.tls }}
  tls:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  rules:
    {{- range .ingress.hosts }}
    - host: {{ .host | quote }}
      http:
        paths:
          {{- range .paths }}
          - path: {{ .path }}
            pathType: {{ .pathType }}
            backend:
              service:
                name: {{ $svc }}
                port:
                  name: {{ $port }}
          {{- end }}
    {{- end }}
{{- end }}
{{- end -}}
