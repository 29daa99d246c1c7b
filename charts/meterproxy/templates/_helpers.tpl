{{/* Names, labels and the numbers derived from the values. */}}

{{- define "meterproxy.fullname" -}}
{{- if contains "meterproxy" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-meterproxy" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meterproxy.selectorLabels" -}}
app.kubernetes.io/name: meterproxy
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "meterproxy.labels" -}}
{{ include "meterproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "meterproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meterproxy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "meterproxy.secretName" -}}
{{- default (include "meterproxy.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/*
meterproxy.config is the config file: .Values.config with the listen
addresses taken from .Values.ports, so the ports are set in one place.
With config.upstream.accounts it leaves out config.upstream.url and of
config.account all but expected_replicas: the defaults above set them,
and meterproxy refuses them beside the accounts, each of which has its
own url and account section (meterproxy.checkAccounts refuses the rest).
The admin listener binds every address of the pod (":port": the pod IP
and its loopback, nothing else in its network namespace), so the kubelet's
probes and Prometheus reach it; meterproxy's own default is loopback.
*/}}
{{- define "meterproxy.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if include "meterproxy.accounts" . -}}
{{- include "meterproxy.checkAccounts" . -}}
{{- $upstream := get $cfg "upstream" -}}
{{- $_ := unset $upstream "url" -}}
{{- $account := dict -}}
{{- with (get $cfg "account" | default dict).expected_replicas -}}
{{- $_ := set $account "expected_replicas" . -}}
{{- end -}}
{{- $_ := set $cfg "account" $account -}}
{{- end -}}
{{- $server := get $cfg "server" | default dict -}}
{{- $_ := set $server "listen" (printf ":%d" (int .Values.ports.proxy)) -}}
{{- $_ := set $server "admin_listen" (printf ":%d" (int .Values.ports.admin)) -}}
{{- $_ := set $cfg "server" $server -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
meterproxy.seconds turns a Go duration of h, m, s and ms parts ("30s",
"1m30s", "1500ms") into whole seconds, rounded up.
*/}}
{{- define "meterproxy.seconds" -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" (toString .) -1 -}}
{{- $n := int (regexFind "^[0-9]+" .) -}}
{{- if hasSuffix "ms" . -}}{{- $ms = add $ms $n -}}
{{- else if hasSuffix "h" . -}}{{- $ms = add $ms (mul $n 3600000) -}}
{{- else if hasSuffix "m" . -}}{{- $ms = add $ms (mul $n 60000) -}}
{{- else -}}{{- $ms = add $ms (mul $n 1000) -}}
{{- end -}}
{{- end -}}
{{- div (add $ms 999) 1000 -}}
{{- end -}}

{{/* meterproxy.shutdownGrace is config.server.shutdown_grace in seconds (default 30). */}}
{{- define "meterproxy.shutdownGrace" -}}
{{- include "meterproxy.seconds" (.Values.config.server.shutdown_grace | default "30s") -}}
{{- end -}}

{{/*
meterproxy.terminationGrace: the pod's terminationGracePeriodSeconds. It
must outlast the preStop sleep plus server.shutdown_grace, or the kubelet
kills requests meterproxy is still draining.
*/}}
{{- define "meterproxy.terminationGrace" -}}
{{- $need := add (int .Values.preStopSleepSeconds) (int (include "meterproxy.shutdownGrace" .)) -}}
{{- $set := int .Values.terminationGracePeriodSeconds -}}
{{- if eq $set 0 -}}
{{- add $need 15 -}}
{{- else if le $set $need -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.server.shutdown_grace (%d s), or the kubelet kills requests still draining" $set $need) -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/*
meterproxy.fleetInFlight: the in-flight bound of the whole fleet, every
pool's together: account.max_in_flight plus each account.models entry's
max_in_flight (each pool is an account of its own, and every replica
serves them all) — with config.upstream.accounts, that sum for each
account's own account section, over every account.
*/}}
{{- define "meterproxy.fleetInFlight" -}}
{{- if include "meterproxy.accounts" . -}}
{{- $fleet := 0 -}}
{{- range $i, $a := .Values.config.upstream.accounts -}}
{{- $acct := $a.account | default dict -}}
{{- if le (int $acct.max_in_flight) 0 -}}
{{- fail (printf "config.upstream.accounts[%d].account.max_in_flight must be > 0" $i) -}}
{{- end -}}
{{- $fleet = add $fleet (int $acct.max_in_flight) -}}
{{- range $acct.models -}}
{{- $fleet = add $fleet (int .max_in_flight) -}}
{{- end -}}
{{- end -}}
{{- $fleet -}}
{{- else -}}
{{- $fleet := int .Values.config.account.max_in_flight -}}
{{- if le $fleet 0 -}}
{{- fail "config.account.max_in_flight must be > 0" -}}
{{- end -}}
{{- range .Values.config.account.models -}}
{{- $fleet = add $fleet (int .max_in_flight) -}}
{{- end -}}
{{- $fleet -}}
{{- end -}}
{{- end -}}

{{/*
meterproxy.perProcessInFlight: the in-flight bound one replica is sized
for: autoscaling.perProcessInFlight, or the sum over pools of each pool's
max_in_flight ÷ account.expected_replicas rounded up (what each replica
enforces of each pool on its own under store.on_error local); with
config.upstream.accounts, that sum over every account's pools, each over
its account's expected_replicas (config.account.expected_replicas when
it sets none).
*/}}
{{- define "meterproxy.perProcessInFlight" -}}
{{- $replicas := int (.Values.config.account.expected_replicas | default 1) -}}
{{- $per := int .Values.autoscaling.perProcessInFlight -}}
{{- if le $replicas 0 -}}
{{- fail "config.account.expected_replicas must be >= 1" -}}
{{- end -}}
{{- if lt $per 0 -}}
{{- fail "autoscaling.perProcessInFlight must be >= 0" -}}
{{- end -}}
{{- if include "meterproxy.accounts" . -}}
{{- if eq $per 0 -}}
{{- range $i, $a := .Values.config.upstream.accounts -}}
{{- $acct := $a.account | default dict -}}
{{- $r := int ($acct.expected_replicas | default $replicas) -}}
{{- if le $r 0 -}}
{{- fail (printf "config.upstream.accounts[%d].account.expected_replicas must be >= 1" $i) -}}
{{- end -}}
{{- $per = add $per (div (add (int $acct.max_in_flight) $r -1) $r) -}}
{{- range $acct.models -}}
{{- $per = add $per (div (add (int .max_in_flight) $r -1) $r) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $fleet := int .Values.config.account.max_in_flight -}}
{{- if le $fleet 0 -}}
{{- fail "config.account.max_in_flight must be > 0" -}}
{{- end -}}
{{- if eq $per 0 -}}
{{- $per = div (add $fleet $replicas -1) $replicas -}}
{{- range .Values.config.account.models -}}
{{- $per = add $per (div (add (int .max_in_flight) $replicas -1) $replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $per -}}
{{- end -}}

{{/*
meterproxy.replicaCeiling: the most replicas that can each obtain their
per-process in-flight bound from the fleet's, every pool's together:
ceil(fleet in flight ÷ per-process bound). Above it a replica cannot
obtain capacity: it adds pods, not throughput (the same number
`meterproxy plan` prints as "max replicas" for an account without
pools).
*/}}
{{- define "meterproxy.replicaCeiling" -}}
{{- $fleet := int (include "meterproxy.fleetInFlight" .) -}}
{{- $per := int (include "meterproxy.perProcessInFlight" .) -}}
{{- div (add $fleet $per -1) $per -}}
{{- end -}}

{{/* meterproxy.maxReplicas: autoscaling.maxReplicas, or the ceiling when 0. */}}
{{- define "meterproxy.maxReplicas" -}}
{{- $set := int .Values.autoscaling.maxReplicas -}}
{{- if eq $set 0 -}}
{{- include "meterproxy.replicaCeiling" . -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/*
The container's resources: the values' own, with a memory limit derived
from config.server.max_body_memory_bytes when none is set — the budget of
docs/security.md ("Memory"): twice the bodies' bound (the bodies, and as
much again of garbage before the collector runs) plus 64 MiB for the
runtime and connections, rounded up to a MiB.
*/}}
{{- define "meterproxy.resources" -}}
{{- $res := deepCopy (default dict .Values.resources) -}}
{{- $limits := default dict (get $res "limits") -}}
{{- if not (get $limits "memory") -}}
{{- $bodies := int64 (default 268435456 (dig "server" "max_body_memory_bytes" nil (default dict .Values.config))) -}}
{{- $mi := int64 1048576 -}}
{{- $budget := add (mul 2 $bodies) (mul 64 $mi) -}}
{{- $_ := set $limits "memory" (printf "%dMi" (div (add $budget (sub $mi 1)) $mi)) -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/*
meterproxy.accounts is non-empty when config.upstream.accounts lists
accounts: several provider accounts behind one proxy (docs/accounts.md,
"Several accounts").
*/}}
{{- define "meterproxy.accounts" -}}
{{- if dig "upstream" "accounts" list (default dict .Values.config) -}}true{{- end -}}
{{- end -}}

{{/*
meterproxy.checkAccounts fails the render on values meterproxy would refuse
beside config.upstream.accounts and that the chart cannot leave out for
the operator: callers' own keys passed through (the default
classify.unknown_callers forward) and a provider key in the Secret. With
several accounts the proxy holds every account's key, and a caller's key
must never reach an account it was not issued for.
*/}}
{{- define "meterproxy.checkAccounts" -}}
{{- if eq (toString (dig "classify" "unknown_callers" "forward" (default dict .Values.config))) "forward" -}}
{{- fail "config.classify.unknown_callers must be reject with config.upstream.accounts: forward passes a caller's own key to whichever account admits it (meterproxy refuses it at start)" -}}
{{- end -}}
{{- if hasKey (default dict .Values.secret.env) "METERPROXY_UPSTREAM_API_KEY" -}}
{{- fail "secret.env.METERPROXY_UPSTREAM_API_KEY is set beside config.upstream.accounts: each account's key goes in the variable its api_key_env names (meterproxy refuses upstream.api_key at start)" -}}
{{- end -}}
{{- end -}}
