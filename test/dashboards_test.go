package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// The parts of a Grafana dashboard the test reads.
type (
	grafanaDashboard struct {
		Title         string         `json:"title"`
		UID           string         `json:"uid"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
		Templating    struct {
			List []grafanaTemplateVar `json:"list"`
		} `json:"templating"`
		Inputs []struct {
			Name     string `json:"name"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
	}
	grafanaPanel struct {
		ID          int                      `json:"id"`
		Type        string                   `json:"type"`
		Title       string                   `json:"title"`
		Description string                   `json:"description"`
		Datasource  json.RawMessage          `json:"datasource"`
		GridPos     struct{ X, Y, W, H int } `json:"gridPos"`
		Targets     []struct {
			RefID      string          `json:"refId"`
			Expr       string          `json:"expr"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"targets"`
		Panels []grafanaPanel `json:"panels"` // a collapsed row's
	}
	grafanaTemplateVar struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Query json.RawMessage `json:"query"`
	}
)

// datasourceUID is a panel's or target's datasource: a legacy name string or
// the uid of a {type, uid} reference.
func datasourceUID(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ref struct {
		UID string `json:"uid"`
	}
	if json.Unmarshal(raw, &ref) == nil {
		return ref.UID
	}
	return ""
}

// flattenPanels lists every panel, those nested in collapsed rows included.
func flattenPanels(panels []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, flattenPanels(p.Panels)...)
	}
	return out
}

// labelValuesQuery matches a Prometheus variable query label_values(sel, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\s*\)$`)

// TestDashboardsGrafana: the dashboard imports as is and every query in it
// parses and names only metrics meterproxy exports.
func TestDashboardsGrafana(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	if d.Title != "meterproxy" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want title meterproxy, a uid, schemaVersion >= 36", d.Title, d.UID, d.SchemaVersion)
	}
	datasources, defined := checkTemplating(t, d)
	panels := 0
	ids := map[int]bool{}
	for _, p := range flattenPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		panels++
		checkPanel(t, p, datasources, defined)
	}
	if panels < 8 {
		t.Errorf("%d panels, want at least 8", panels)
	}
}

// checkTemplating checks the dashboard's variables and returns the datasource
// references a panel may use and the names of the variables it defines.
func checkTemplating(t *testing.T, d grafanaDashboard) (datasources, defined []string) {
	t.Helper()
	for _, in := range d.Inputs {
		if in.PluginID == "prometheus" {
			datasources = append(datasources, "${"+in.Name+"}")
		}
	}
	for _, v := range d.Templating.List {
		defined = append(defined, v.Name)
		var query string
		if json.Unmarshal(v.Query, &query) != nil {
			var q struct {
				Query string `json:"query"`
			}
			_ = json.Unmarshal(v.Query, &q) // an absent or other query leaves it empty
			query = q.Query
		}
		switch {
		case v.Type == "datasource" && query == "prometheus":
			datasources = append(datasources, "${"+v.Name+"}", "$"+v.Name)
		case v.Type == "query":
			m := labelValuesQuery.FindStringSubmatch(query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, query)
				continue
			}
			// label_values(sel, label) lists what count by (label) (sel) groups by.
			expr, err := substituteGrafana("count by ("+m[2]+") ("+m[1]+")", defined)
			errs := append(checkPromQL(expr), err)
			if err := errors.Join(errs...); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
		}
	}
	if len(datasources) == 0 {
		t.Error("no Prometheus datasource input or datasource variable: the dashboard does not import as is")
	}
	return datasources, defined
}

func checkPanel(t *testing.T, p grafanaPanel, datasources, defined []string) {
	t.Helper()
	if d := strings.TrimSpace(p.Description); d == "" || strings.Contains(d, "\n") {
		t.Errorf("panel %q: want a one-line description, have %q", p.Title, p.Description)
	}
	if len(p.Targets) == 0 {
		t.Errorf("panel %q has no queries", p.Title)
	}
	if ds := datasourceUID(p.Datasource); !slices.Contains(datasources, ds) {
		t.Errorf("panel %q: datasource %q, want one of %v", p.Title, ds, datasources)
	}
	for _, target := range p.Targets {
		if ds := datasourceUID(target.Datasource); ds != "" && !slices.Contains(datasources, ds) {
			t.Errorf("panel %q, query %s: datasource %q, want one of %v", p.Title, target.RefID, ds, datasources)
		}
		expr, err := substituteGrafana(target.Expr, defined)
		errs := append(checkPromQL(expr), err)
		if err == nil {
			errs = append(errs, checkAccountScoped(target.Expr, defined)...)
		}
		if err := errors.Join(errs...); err != nil {
			t.Errorf("panel %q, query %s %q:\n%v", p.Title, target.RefID, target.Expr, err)
		}
	}
}

// accountVar stands for the dashboard's Account variable in a query
// checkAccountScoped reads: a matcher value no other variable becomes.
const accountVar = "account_variable"

// checkAccountScoped: in a panel's query every selector of a family with
// the account label filters it by the Account variable (account=~"$account"),
// and every aggregation that keeps pool keeps account too (checkByAccount).
func checkAccountScoped(expr string, defined []string) []error {
	if !slices.Contains(defined, "account") {
		return []error{errors.New("the dashboard has no account variable")}
	}
	expr, err := substituteGrafana(strings.ReplaceAll(expr, "$account", accountVar), defined)
	if err != nil {
		return []error{err}
	}
	node, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return []error{err}
	}
	errs := checkByAccount(node)
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		spec, _, _ := seriesSpec(selectorName(vs))
		if _, has := spec.labels["account"]; !has {
			return nil
		}
		if !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
			return m.Name == "account" && m.Type == labels.MatchRegexp && m.Value == accountVar
		}) {
			errs = append(errs, fmt.Errorf("%s: want account=~\"$account\"", vs))
		}
		return nil
	})
	return errs
}

// checkByAccount: an aggregation or a match by pool is by account and
// pool too, since pools of one name in two accounts are two pools.
func checkByAccount(node parser.Node) []error {
	var errs []error
	byPoolAlone := func(ls []string) bool { return slices.Contains(ls, "pool") && !slices.Contains(ls, "account") }
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			if !n.Without && byPoolAlone(n.Grouping) {
				errs = append(errs, fmt.Errorf("%s: by pool without account", n))
			}
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil && m.On && byPoolAlone(m.MatchingLabels) {
				errs = append(errs, fmt.Errorf("%s: on pool without account", n))
			}
		}
		return nil
	})
	return errs
}

// The rule file format of Prometheus (and of a PrometheusRule's spec), every
// field it has, so that a misspelt key fails to decode.
type (
	ruleFile struct {
		Groups []ruleGroup `yaml:"groups"`
	}
	ruleGroup struct {
		Name        string            `yaml:"name"`
		Interval    string            `yaml:"interval,omitempty"`
		QueryOffset string            `yaml:"query_offset,omitempty"`
		Limit       int               `yaml:"limit,omitempty"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		Rules       []rule            `yaml:"rules"`
	}
	rule struct {
		Alert         string            `yaml:"alert,omitempty"`
		Record        string            `yaml:"record,omitempty"`
		Expr          string            `yaml:"expr"`
		For           string            `yaml:"for,omitempty"`
		KeepFiringFor string            `yaml:"keep_firing_for,omitempty"`
		Labels        map[string]string `yaml:"labels,omitempty"`
		Annotations   map[string]string `yaml:"annotations,omitempty"`
	}
	prometheusRule struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Metadata   map[string]any `yaml:"metadata"`
		Spec       ruleFile       `yaml:"spec"`
	}
)

// decodeYAML decodes src into v, rejecting keys v has no field for.
func decodeYAML(src []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// wantAlerts are the alerts the rules file must define.
var wantAlerts = []string{"InteractiveRefused", "BulkStarved", "StoreDegraded", "Upstream429s", "AccountIsTheConstraint"}

// TestDashboardsAlertRules: the plain rules file decodes as Prometheus' rule
// format, defines the alerts, each with a summary and a description, and
// every expression parses and names only metrics meterproxy exports.
func TestDashboardsAlertRules(t *testing.T) {
	t.Parallel()
	rules := readRuleFile(t)
	checkRuleGroups(t, rules.Groups)
}

func readRuleFile(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := decodeYAML(raw, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rules
}

func checkRuleGroups(t *testing.T, groups []ruleGroup) {
	t.Helper()
	if len(groups) == 0 {
		t.Fatal("no rule groups")
	}
	var alerts []string
	for _, g := range groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("group %s: rule %q must be an alert or a recording rule", g.Name, name)
			}
			if slices.Contains(alerts, name) {
				t.Errorf("alert %s defined twice", name)
			}
			alerts = append(alerts, name)
			if err := errors.Join(checkRuleExpr(r.Expr)...); err != nil {
				t.Errorf("rule %s: %q:\n%v", name, r.Expr, err)
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := model.ParseDuration(d); d != "" && err != nil {
					t.Errorf("rule %s: %v", name, err)
				}
			}
			if r.Alert != "" {
				checkAnnotations(t, r)
			}
		}
	}
	for _, want := range wantAlerts {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// checkRuleExpr is checkPromQL, and checkByAccount, of a rule's
// expression.
func checkRuleExpr(expr string) []error {
	errs := checkPromQL(expr)
	if node, err := promqlParser.ParseExpr(expr); err == nil {
		errs = append(errs, checkByAccount(node)...)
	}
	return errs
}

// prometheusTemplateFuncs stands in for the functions Prometheus offers
// alert templates, so that annotations parse as Prometheus would parse them.
var prometheusTemplateFuncs = template.FuncMap{
	"humanize": fmt.Sprint, "humanize1024": fmt.Sprint, "humanizeDuration": fmt.Sprint,
	"humanizePercentage": fmt.Sprint, "humanizeTimestamp": fmt.Sprint, "toUpper": strings.ToUpper,
	"toLower": strings.ToLower, "title": fmt.Sprint, "query": fmt.Sprint, "first": fmt.Sprint,
	"label": fmt.Sprint, "value": fmt.Sprint, "reReplaceAll": fmt.Sprint, "match": fmt.Sprint,
	"stripPort": fmt.Sprint, "stripDomain": fmt.Sprint, "externalURL": fmt.Sprint,
}

// checkAnnotations: an alert tells who reads it what happened and what to do.
func checkAnnotations(t *testing.T, r rule) {
	t.Helper()
	for _, key := range []string{"summary", "description"} {
		text := strings.TrimSpace(r.Annotations[key])
		if text == "" {
			t.Errorf("alert %s has no %s", r.Alert, key)
			continue
		}
		// Prometheus defines these variables before expanding an annotation.
		src := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text
		if _, err := template.New(key).Funcs(prometheusTemplateFuncs).Parse(src); err != nil {
			t.Errorf("alert %s, %s: %v", r.Alert, key, err)
		}
	}
	if r.Labels["severity"] == "" {
		t.Errorf("alert %s has no severity label", r.Alert)
	}
}

// helmAction matches a Helm action; a raw-string action {{`…`}} captures the
// text Helm prints for it.
var helmAction = regexp.MustCompile("\\{\\{`(.*?)`\\}\\}|\\{\\{.*?\\}\\}")

// helmPlaceholder stands for what a Helm action inside a line prints.
const helmPlaceholder = "helm"

// stripHelm turns a Helm template into the YAML it renders, closely enough to
// compare its data: lines that hold nothing but Helm actions (if, with, end,
// comments) go, raw-string actions become their text as Helm prints them, and
// any other action inside a line becomes a placeholder. An action that spans
// lines (a multi-line comment) is not understood: keep each on one line.
func stripHelm(src string) string {
	var out []string
	for _, line := range strings.Split(src, "\n") {
		bare := strings.TrimSpace(helmAction.ReplaceAllString(line, ""))
		if bare == "" && strings.Contains(line, "{{") && !strings.Contains(line, "{{`") {
			continue
		}
		out = append(out, helmAction.ReplaceAllStringFunc(line, func(a string) string {
			if strings.HasPrefix(a, "{{`") {
				return helmAction.FindStringSubmatch(a)[1]
			}
			return helmPlaceholder
		}))
	}
	return strings.Join(out, "\n")
}

// TestDashboardsPrometheusRuleTemplate: the chart's PrometheusRule is guarded
// by prometheusRule.enabled and holds exactly the plain file's rule groups.
func TestDashboardsPrometheusRuleTemplate(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), ruleTemplate))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if lines[0] != ruleTemplateIf || lines[len(lines)-1] != ruleTemplateEnd {
		t.Errorf("%s: want it wrapped in %q … %q", ruleTemplate, ruleTemplateIf, ruleTemplateEnd)
	}
	var pr prometheusRule
	if err := decodeYAML([]byte(stripHelm(string(raw))), &pr); err != nil {
		t.Fatalf("%s, Helm actions stripped: %v", ruleTemplate, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata["name"] == nil {
		t.Errorf("apiVersion %q, kind %q, metadata %v: want a monitoring.coreos.com/v1 PrometheusRule with a name", pr.APIVersion, pr.Kind, pr.Metadata)
	}
	checkRuleGroups(t, pr.Spec.Groups)
	plain := readRuleFile(t)
	if !reflect.DeepEqual(pr.Spec.Groups, plain.Groups) {
		t.Errorf("%s and %s hold different rules:\n%s", ruleTemplate, rulesFile, diffRules(plain.Groups, pr.Spec.Groups))
	}
}

// diffRules names the first rules that differ between the plain file (want)
// and the template (got).
func diffRules(want, got []ruleGroup) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d groups in the file, %d in the template", len(want), len(got))
	}
	var b strings.Builder
	for i := range want {
		w, g := want[i], got[i]
		if len(w.Rules) != len(g.Rules) {
			fmt.Fprintf(&b, "group %s: %d rules in the file, %d in the template\n", w.Name, len(w.Rules), len(g.Rules))
			continue
		}
		for j := range w.Rules {
			if !reflect.DeepEqual(w.Rules[j], g.Rules[j]) {
				fmt.Fprintf(&b, "file:     %+v\ntemplate: %+v\n", w.Rules[j], g.Rules[j])
			}
		}
		w.Rules, g.Rules = nil, nil
		if !reflect.DeepEqual(w, g) {
			fmt.Fprintf(&b, "file group:     %+v\ntemplate group: %+v\n", w, g)
		}
	}
	return b.String()
}

// TestDashboardsMetricChecker: the checker the tests above rely on rejects
// what it should, so a panel naming a metric that does not exist fails.
func TestDashboardsMetricChecker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`sum by (class) (rate(meterproxy_requests_total{job=~"$job"}[$__rate_interval]))`, true},
		{`rate(meterproxy_nope_total[$__rate_interval])`, false},
		{`{__name__="meterproxy_nope_total"}`, false},
		{`{job="meterproxy"}`, false},
		{`histogram_quantile(0.99, sum by (class, le) (rate(meterproxy_queue_wait_seconds_bucket[5m])))`, true},
		{`sum(rate(meterproxy_upstream_duration_seconds_sum[5m])) / max(meterproxy_in_flight_limit)`, true},
		{`meterproxy_upstream_duration_seconds`, false}, // a classic histogram's bare name has no series
		{`meterproxy_in_flight_sum`, false},             // a gauge has no _sum
		{`meterproxy_requests_total{reason="queue_full"}`, false},
		{`meterproxy_requests_total{outcome="refussed"}`, false},
		{`meterproxy_admissions_total{outcome=~"admitted|held"}`, true},
		{`meterproxy_admissions_total{outcome=~"admitted|hold"}`, false},
		{`meterproxy_tokens_total{caller="anyone"}`, true},
		{`sum by (reason) (meterproxy_requests_total)`, false},
		{`meterproxy_in_flight_limit > on (class) meterproxy_queue_depth`, true},
		{`meterproxy_in_flight_limit > on (reason) meterproxy_queue_depth`, false},
		{`go_goroutines{job="x"} + on (pod) process_open_fds`, true},
		{`rate(meterproxy_requests_total[5m]`, false},
		{`rate(meterproxy_requests_total{job=~"$undefined"}[5m])`, false},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			expr, err := substituteGrafana(tc.expr, []string{"job"})
			errs := append(checkPromQL(expr), err)
			got := errors.Join(errs...)
			if (got == nil) != tc.ok {
				t.Fatalf("ok = %v, want %v (%v)", got == nil, tc.ok, got)
			}
			if got != nil {
				t.Log(got)
			}
		})
	}
}

// TestDashboardsAccountChecker: the account check the dashboard and rules
// tests rely on rejects a pool family read across accounts.
func TestDashboardsAccountChecker(t *testing.T) {
	t.Parallel()
	vars := []string{"job", "account", "pool"}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`sum by (account, pool) (meterproxy_queue_depth{job=~"$job",account=~"$account",pool=~"$pool"})`, true},
		{`sum by (pool) (meterproxy_queue_depth{job=~"$job",account=~"$account",pool=~"$pool"})`, false},
		{`sum(meterproxy_queue_depth{job=~"$job",pool=~"$pool"})`, false},
		{`sum(meterproxy_queue_depth{job=~"$job",account=~"$pool"})`, false},
		{`max by (account, pool) (meterproxy_in_flight_limit{account=~"$account"}) > on (pool) meterproxy_upstream_hold_seconds{account=~"$account"}`, false},
		{`sum by (class) (rate(meterproxy_requests_total{job=~"$job"}[5m]))`, true}, // no account label
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got := errors.Join(checkAccountScoped(tc.expr, vars)...)
			if (got == nil) != tc.ok {
				t.Fatalf("ok = %v, want %v (%v)", got == nil, tc.ok, got)
			}
		})
	}
}
