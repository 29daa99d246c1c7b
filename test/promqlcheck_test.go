package test

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// The files under charts/meterproxy that name meterproxy's metrics, relative
// to the module root.
const (
	dashboardFile   = "charts/meterproxy/dashboards/meterproxy.json"
	rulesFile       = "charts/meterproxy/rules/meterproxy-rules.yaml"
	ruleTemplate    = "charts/meterproxy/templates/prometheusrule.yaml"
	ruleTemplateIf  = "{{- if .Values.prometheusRule.enabled }}"
	ruleTemplateEnd = "{{- end }}"
)

// metricSpec is what meterproxy exports under one metric name: its type and
// its labels, each with its closed set of values (nil: open, like caller).
type metricSpec struct {
	typ    string
	labels map[string][]string
}

var (
	classValues = []string{"interactive", "bulk"}
	classLabel  = map[string][]string{"class": classValues}
	callerLabel = map[string][]string{"caller": nil}
	// pool's values are the config's pool names, "default" (the account's)
	// and, on the families that count requests before their pool is known,
	// "none"; account's, beside it on every family that has it, the
	// configured account names, "default" (the one account without
	// upstream.accounts) and "none" where pool is.
	poolLabel      = map[string][]string{"account": nil, "pool": nil}
	poolClassLabel = map[string][]string{"account": nil, "pool": nil, "class": classValues}
	// modeValues are the mode label's, on the gauges admission's decisions
	// drive: shadow mode's simulated decisions are told apart.
	modeValues         = []string{"enforce", "shadow"}
	poolClassModeLabel = map[string][]string{"account": nil, "pool": nil, "class": classValues, "mode": modeValues}
	callerModeLabel    = map[string][]string{"caller": nil, "mode": modeValues}
	scrapeLabels       = []string{"job", "instance"} // added by Prometheus to every series
	// budget's values are caller:<name> and class:<class>, from the config.
	budgetLabel = map[string][]string{"budget": nil}
)

// exportedMetrics is every metric meterproxy exports (docs/metrics.md, "Metrics"),
// besides the go_* and process_* collectors.
var exportedMetrics = map[string]metricSpec{
	"meterproxy_requests_total": {"counter", map[string][]string{"class": classValues, "caller": nil,
		"outcome": {"forwarded", "refused", "cancelled"}, "code": nil}},
	"meterproxy_refusals_total": {"counter", map[string][]string{"account": nil, "pool": nil, "class": classValues, "reason": {"unknown_caller",
		"body_too_large", "bad_request", "queue_full", "max_wait_exceeded", "caller_cap_exceeded", "shutting_down", "store_unavailable",
		"upstream_unreachable", "upstream_timeout", "method_not_allowed", "non_canonical_path",
		"conflicting_credentials", "body_read_timeout", "body_memory_exhausted", "pool_removed", "duplicate_key",
		"unsupported_encoding", "charge_too_large", "budget_exceeded", "unpriced_model", "unmetered_api", "batch_unmetered",
		"too_many_streams", "too_many_sockets", "too_many_sessions"}}},
	"meterproxy_negotiations_total": {"counter", map[string][]string{"reason": {"upgrade_required", "not_an_api"}}},
	"meterproxy_admissions_total": {"counter", map[string][]string{"account": nil, "pool": nil, "class": classValues,
		"outcome": {"admitted", "held", "refused", "cancelled", "batch", "upload"}}},
	"meterproxy_caller_admissions_total":   {"counter", map[string][]string{"account": nil, "pool": nil, "class": classValues, "caller": nil}},
	"meterproxy_caller_waiting":            {"gauge", map[string][]string{"account": nil, "pool": nil, "class": classValues, "caller": nil}},
	"meterproxy_body_memory_bytes":         {"gauge", nil},
	"meterproxy_body_memory_limit_bytes":   {"gauge", nil},
	"meterproxy_queue_wait_seconds":        {"histogram", map[string][]string{"account": nil, "pool": nil, "class": classValues, "outcome": {"admitted", "refused"}}},
	"meterproxy_queue_depth":               {"gauge", poolClassModeLabel},
	"meterproxy_in_flight":                 {"gauge", poolClassModeLabel},
	"meterproxy_fleet_in_flight":           {"gauge", poolClassModeLabel},
	"meterproxy_in_flight_limit":           {"gauge", poolLabel},
	"meterproxy_measured_in_flight":        {"gauge", classLabel},
	"meterproxy_upstream_duration_seconds": {"histogram", poolClassLabel},
	"meterproxy_shadow_decisions_total": {"counter", map[string][]string{"class": classValues,
		"outcome": {"admitted", "held", "queue_full", "max_wait_exceeded", "caller_cap_exceeded", "charge_too_large", "unfinished", "store_unavailable",
			"budget_exceeded", "unpriced_model", "unmetered_api"}}},
	"meterproxy_upstream_limit":           {"gauge", map[string][]string{"account": nil, "pool": nil, "kind": {"requests", "tokens"}}},
	"meterproxy_upstream_remaining":       {"gauge", map[string][]string{"account": nil, "pool": nil, "kind": {"requests", "tokens"}}},
	"meterproxy_upstream_reset_seconds":   {"gauge", map[string][]string{"account": nil, "pool": nil, "kind": {"requests", "tokens"}}},
	"meterproxy_upstream_hold_seconds":    {"gauge", poolLabel},
	"meterproxy_upstream_429_total":       {"counter", nil},
	"meterproxy_access_log_dropped_total": {"counter", nil},
	"meterproxy_batch_enqueued_tokens":    {"gauge", poolClassLabel},
	"meterproxy_flex_retries_total":       {"counter", poolLabel},
	"meterproxy_account_spills_total":     {"counter", map[string][]string{"account": nil}},
	"meterproxy_tokens_total": {"counter", map[string][]string{"account": nil, "pool": nil, "class": classValues, "caller": nil,
		"kind": {"input", "output"}, "estimated": {"true", "false"}}},
	"meterproxy_window_used_requests":             {"gauge", poolClassModeLabel},
	"meterproxy_window_used_tokens":               {"gauge", poolClassModeLabel},
	"meterproxy_limit_requests_per_second":        {"gauge", poolClassLabel},
	"meterproxy_limit_tokens_per_second":          {"gauge", poolClassLabel},
	"meterproxy_responses_cut_short_total":        {"counter", map[string][]string{"class": classValues, "side": {"client", "upstream"}}},
	"meterproxy_background_responses_total":       {"counter", map[string][]string{"class": classValues}},
	"meterproxy_store_degraded":                   {"gauge", nil},
	"meterproxy_store_errors_total":               {"counter", nil},
	"meterproxy_store_call_duration_seconds":      {"histogram", map[string][]string{"result": {"ok", "error"}}},
	"meterproxy_config_reloads_total":             {"counter", map[string][]string{"result": {"success", "failure", "needs_restart"}}},
	"meterproxy_caller_queue_depth":               {"gauge", callerModeLabel},
	"meterproxy_caller_in_flight":                 {"gauge", callerLabel},
	"meterproxy_caller_cap_slots_used":            {"gauge", callerModeLabel},
	"meterproxy_caller_in_flight_limit":           {"gauge", callerLabel},
	"meterproxy_caller_limit_requests_per_second": {"gauge", callerLabel},
	"meterproxy_adaptive_decisions_total": {"counter", map[string][]string{"account": nil, "pool": nil, "action": {"grow", "settle",
		"probe_up", "probe_down", "revert", "back_off", "latency_rise", "hold"}}},
	"meterproxy_adaptive_work_per_second": {"gauge", poolLabel},
	"meterproxy_spend_usd_total": {"counter", map[string][]string{"account": nil, "pool": nil, "class": classValues, "caller": nil,
		"estimated": {"true", "false"}}},
	"meterproxy_unpriced_requests_total":           {"counter", poolLabel},
	"meterproxy_budget_limit_usd":                  {"gauge", budgetLabel},
	"meterproxy_budget_spent_usd":                  {"gauge", budgetLabel},
	"meterproxy_budget_reserved_usd":               {"gauge", budgetLabel},
	"meterproxy_budget_alert_usd":                  {"gauge", budgetLabel},
	"meterproxy_budget_local_spent_usd_total":      {"counter", budgetLabel},
	"meterproxy_budget_local_reconciled_usd_total": {"counter", budgetLabel},
	"meterproxy_budget_local":                      {"gauge", nil},
	"meterproxy_adaptive_latency_seconds_per_work": {"gauge", poolLabel},
	"meterproxy_sockets_open":                      {"gauge", map[string][]string{"api": {"responses", "realtime"}, "class": classValues}},
	"meterproxy_socket_turns_total": {"counter", map[string][]string{"api": {"responses", "realtime"}, "class": classValues,
		"outcome": {"forwarded", "refused", "cancelled"}}},
	"meterproxy_sockets_closed_total":            {"counter", map[string][]string{"api": {"responses", "realtime"}, "side": {"client", "upstream", "meterproxy"}}},
	"meterproxy_realtime_sessions":               {"gauge", map[string][]string{"class": classValues, "caller": nil}},
	"meterproxy_realtime_unheld_responses_total": {"counter", classLabel},
	// One series each: what the replica runs (issue 37, item 5).
	"meterproxy_build_info":  {"gauge", map[string][]string{"version": nil, "goversion": nil}},
	"meterproxy_config_info": {"gauge", map[string][]string{"hash": nil, "mode": {"enforce", "shadow"}}},
}

// seriesSpec resolves a series name to what meterproxy exports under it: a
// metric itself, or the _bucket (with le), _sum or _count series of a
// histogram. open is set for the go_* and process_* collectors, whose labels
// are not checked.
func seriesSpec(name string) (spec metricSpec, open, ok bool) {
	if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
		return metricSpec{}, true, true
	}
	if s, found := exportedMetrics[name]; found {
		return s, false, s.typ != "histogram" // a classic histogram has no series of its bare name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		s, found := exportedMetrics[strings.TrimSuffix(name, suffix)]
		if !strings.HasSuffix(name, suffix) || !found || s.typ != "histogram" {
			continue
		}
		if suffix == "_bucket" {
			s.labels = maps.Clone(s.labels)
			if s.labels == nil {
				s.labels = map[string][]string{}
			}
			s.labels["le"] = nil
		}
		return s, false, true
	}
	return metricSpec{}, false, false
}

var promqlParser = parser.NewParser(parser.Options{})

// checkPromQL parses expr with Prometheus' own parser and reports every
// problem: a parse error, a selector that names no metric or one meterproxy
// does not export, a label matcher on a label the metric does not carry or
// with a value outside its closed set, and a `by`/`on` label that no metric
// below it carries.
func checkPromQL(expr string) []error {
	node, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return []error{err}
	}
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, checkSelector(n)...)
		case *parser.AggregateExpr:
			if !n.Without {
				errs = append(errs, checkGrouping(n.Grouping, n.Expr)...)
			}
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil && m.On {
				errs = append(errs, checkGrouping(m.MatchingLabels, n)...)
			}
		}
		return nil
	})
	return errs
}

// selectorName is the metric name a selector names, by name or __name__="…".
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// literalAlternation matches a regexp that is only literal names joined by |.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

func checkSelector(vs *parser.VectorSelector) []error {
	name := selectorName(vs)
	if name == "" {
		return []error{fmt.Errorf("selector %s names no metric", vs)}
	}
	spec, open, ok := seriesSpec(name)
	if s, found := exportedMetrics[name]; !ok && found {
		return []error{fmt.Errorf("%s is a %s: select its _bucket, _sum or _count series", name, s.typ)}
	}
	if !ok {
		return []error{fmt.Errorf("%s is not a metric meterproxy exports", name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if open || m.Name == model.MetricNameLabel || slices.Contains(scrapeLabels, m.Name) {
			continue
		}
		values, known := spec.labels[m.Name]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("%s has no label %q", name, m.Name))
		case values == nil:
		case m.Type == labels.MatchEqual || m.Type == labels.MatchNotEqual:
			if !slices.Contains(values, m.Value) {
				errs = append(errs, fmt.Errorf("%s{%s}: %q is not one of %v", name, m.Name, m.Value, values))
			}
		case literalAlternation.MatchString(m.Value): // =~ and !~ with plain names
			for _, v := range strings.Split(m.Value, "|") {
				if !slices.Contains(values, v) {
					errs = append(errs, fmt.Errorf("%s{%s}: %q is not one of %v", name, m.Name, v, values))
				}
			}
		}
	}
	return errs
}

// checkGrouping reports each label of by/on that is neither a scrape label
// nor a label of some metric selected below node.
func checkGrouping(grouping []string, node parser.Node) []error {
	carried := map[string]bool{}
	for _, l := range scrapeLabels {
		carried[l] = true
	}
	anyOpen := false
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			spec, open, _ := seriesSpec(selectorName(vs))
			anyOpen = anyOpen || open
			for l := range spec.labels {
				carried[l] = true
			}
		}
		return nil
	})
	var errs []error
	for _, l := range grouping {
		if !carried[l] && !anyOpen {
			errs = append(errs, fmt.Errorf("no metric in %s carries the label %q", node, l))
		}
	}
	return errs
}

// grafanaVariable matches $name, ${name}, ${name:format} and [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]`)

// grafanaBuiltins are Grafana's own variables, as values PromQL accepts.
var grafanaBuiltins = map[string]string{
	"__rate_interval": "5m", "__interval": "5m", "__range": "5m",
	"__interval_ms": "300000", "__range_ms": "300000", "__range_s": "300",
}

// substituteGrafana replaces Grafana's variables in expr: the built-in
// intervals by 5m, the dashboard's own variables (defined) by `.+` (they are
// label matcher values here). An undefined variable is an error.
func substituteGrafana(expr string, defined []string) (string, error) {
	var errs []error
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVariable.FindStringSubmatch(v)
		name := m[1] + m[2] + m[3]
		if val, ok := grafanaBuiltins[name]; ok {
			return val
		}
		if slices.Contains(defined, name) {
			return ".+"
		}
		errs = append(errs, fmt.Errorf("undefined variable %s", v))
		return v
	})
	return out, errors.Join(errs...)
}
