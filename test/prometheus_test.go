//go:build load

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// promServer is a real Prometheus (Debian's package: .ci/ensure-prometheus)
// scraping targets every second and evaluating the chart's alert rules.
type promServer struct {
	url string
}

// startPrometheus runs prometheus on a free port, scraping targets (host:port
// of /metrics) as job "meterproxy" every second, with the chart's rules.
func startPrometheus(t *testing.T, targets []string) *promServer {
	t.Helper()
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		bin = "prometheus"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("no prometheus (%v): run .ci/ensure-prometheus (make test does) or set PROMETHEUS", err)
	}
	rules, err := filepath.Abs(filepath.Join("..", "charts", "meterproxy", "rules", "meterproxy-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 900ms}
rule_files: [%q]
scrape_configs:
  - job_name: meterproxy
    static_configs: [{targets: [%s]}]
`, rules, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	logs := &syncWriter{}
	//nolint:gosec // PROMETHEUS is the test runner's own choice of binary; the arguments are the test's
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus logs:\n%s", tail(logs.String(), 30))
		}
	})
	p := &promServer{url: "http://" + addr}
	poll.Until(t, "prometheus ready", func() bool {
		res, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return p
}

// promSeries is one series of a query's answer: its labels and its values
// (one for an instant query; NaN where Prometheus says so).
type promSeries struct {
	labels map[string]string
	values []float64
}

// query runs expr over [from, to] at step 1s (an instant query at to when
// from is zero) and returns its series; a query Prometheus refuses fails
// the test.
func (p *promServer) query(t *testing.T, expr string, from, to time.Time) []promSeries {
	t.Helper()
	v := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if from.IsZero() {
		v.Set("time", strconv.FormatInt(to.Unix(), 10))
	} else {
		path = "/api/v1/query_range"
		v.Set("start", strconv.FormatInt(from.Unix(), 10))
		v.Set("end", strconv.FormatInt(to.Unix(), 10))
		v.Set("step", "1")
	}
	res, err := http.Get(p.url + path + "?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var body struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string
				Value  []any
				Values [][]any
			}
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %s: %v %s", expr, err, body.Error)
	}
	out := make([]promSeries, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s := promSeries{labels: r.Metric}
		points := r.Values
		if r.Value != nil {
			points = [][]any{r.Value}
		}
		for _, pt := range points {
			f, err := strconv.ParseFloat(pt[1].(string), 64)
			if err != nil {
				t.Fatalf("query %s: value %v", expr, pt[1])
			}
			s.values = append(s.values, f)
		}
		out = append(out, s)
	}
	return out
}

// scalar is the single value of an instant query (0 when it is empty).
func (p *promServer) scalar(t *testing.T, expr string, at time.Time) float64 {
	t.Helper()
	s := p.query(t, expr, time.Time{}, at)
	if len(s) == 0 {
		return 0
	}
	if len(s) > 1 {
		t.Fatalf("query %s: %d series, want one", expr, len(s))
	}
	return s[0].values[0]
}

// waitScraped waits until Prometheus holds p's count of requests as p
// itself reports it: its last answers are in the time series.
func (p *promServer) waitScraped(t *testing.T, px *procs.Proxy, instance string) {
	t.Helper()
	poll.Until(t, "Prometheus to hold "+instance+"'s counts", func() bool {
		want := sum(scrape(t, px.AdminURL), "meterproxy_requests_total", nil)
		return p.scalar(t, fmt.Sprintf(`sum(meterproxy_requests_total{instance=%q})`, instance), time.Now()) == want
	})
}

// TestDashboardAndAlertsOnRealPrometheus: a real Prometheus scrapes a
// 2-replica fleet sharing Redis through a scripted run — interactive
// steady, a bulk flood refused at max_wait, Redis killed and restarted,
// then a replica drained — and every panel of the dashboard (Grafana's
// variables substituted) is evaluated on it: each returns data, and the
// panels whose values the test knows tell it true (counts, degraded
// seconds, limits, bounds). Every alert rule loads and evaluates, and none
// fires that the run gives no cause for.
func TestDashboardAndAlertsOnRealPrometheus(t *testing.T) {
	const (
		rpm = 600 // 10 a second
		// max_wait sits inside a bucket of meterproxy_queue_wait_seconds
		// (1 s to 2 s), not on its edge: a grant that raced a waiter's
		// timeout is kept (limiter.leave), so an admitted wait may pass
		// max_wait by how late the timer fired on a loaded machine, and
		// the check below allows that up to the bucket's edge.
		maxWait  = 1500 * time.Millisecond
		waitEdge = 2.0 // seconds: the bucket bound above maxWait
		outage   = 6 * time.Second
		inFlight = 20
	)
	srv := redistest.Start(t)
	if !srv.Owned() {
		t.Skip("kills Redis: needs a redis-server of its own (REDIS_URL points at a shared one)")
	}
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{RPM: 10 * rpm, Latency: 50 * time.Millisecond}))
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("account.requests_per_minute", rpm)
	cfg.set("account.tokens_per_minute", 6_000_000) // exported, never binding
	cfg.set("account.max_in_flight", inFlight)
	cfg.set("account.expected_replicas", 2)
	cfg.set("classes.bulk.max_wait", maxWait.String())
	cfg.set("store.timeout", "200ms")
	cfg.set("callers", []map[string]any{
		{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"},
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk", "max_in_flight": 8},
		// A budgeted caller that sends nothing: the Budget used panel's
		// families exist only for configured budgets, and every panel must
		// show data (a budget of the run's callers would refuse while
		// Redis is down: budgets fail closed).
		{"name": "reports", "key_sha256": "b744db691d21b4c8c17916eedae8c6635d6bb6f297c0b1cbbca5034770c2db44", "class": "bulk", "budget": map[string]any{"usd": 50, "per": "month"}},
	})
	// An adaptive pool the run's model never matches: its families (the
	// dashboard's Adaptive bound panel) are exported only for adaptive
	// pools, and every panel must show data.
	cfg.set("account.models", []map[string]any{
		{"name": "self-hosted", "match": []string{"llama-*"}, "max_in_flight": 16, "adaptive_in_flight": true},
	})
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	admin := func(p *procs.Proxy) string { return strings.TrimPrefix(p.AdminURL, "http://") }
	prom := startPrometheus(t, []string{admin(replicas[0]), admin(replicas[1])})
	poll.Until(t, "both targets scraped", func() bool {
		return prom.scalar(t, `count(up{job="meterproxy"} == 1)`, time.Now()) == 2
	})

	// The run: a balancer over the replicas still serving.
	// outstanding counts, by replica URL, the requests sent and not yet
	// answered.
	var mu sync.Mutex
	serving := []string{replicas[0].URL, replicas[1].URL}
	outstanding := map[string]int{}
	var next int
	pick := func() (string, func()) {
		mu.Lock()
		defer mu.Unlock()
		next++
		url := serving[next%len(serving)]
		outstanding[url]++
		return url, func() {
			mu.Lock()
			outstanding[url]--
			mu.Unlock()
		}
	}
	out := newOutcomes()
	client := newClient(t, 64)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	send := func(ctx context.Context, class, key string) {
		url, done := pick()
		status, _, b, err := postFull(t, client, url+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key})
		done()
		if ctx.Err() != nil && err != nil {
			return
		}
		out.record(class, status, b, err)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	tickUntil(ctx, &wg, 500*time.Millisecond, func() { send(ctx, "interactive", chatKey) })
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				send(ctx, "bulk", importKey)
			}
		})
	}
	time.Sleep(10 * time.Second) // the load runs; Prometheus scrapes
	srv.Kill(t)
	killed := time.Now()
	time.Sleep(outage)
	srv.Restart(t)
	restarted := time.Now()
	poll.Until(t, "both replicas back on Redis", func() bool {
		return sum(scrape(t, replicas[0].AdminURL), "meterproxy_store_degraded", nil) == 0 &&
			sum(scrape(t, replicas[1].AdminURL), "meterproxy_store_degraded", nil) == 0
	})
	time.Sleep(8 * time.Second)
	// Drain the second replica: the balancer stops sending to it first.
	mu.Lock()
	serving = serving[:1]
	mu.Unlock()
	poll.Until(t, "the drained replica's last answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outstanding[replicas[1].URL] == 0
	})
	prom.waitScraped(t, replicas[1], admin(replicas[1]))
	if err := replicas[1].Stop(30 * time.Second); err != nil {
		t.Errorf("the drained replica did not stop cleanly: %v", err)
	}
	time.Sleep(5 * time.Second)
	cancel()
	wg.Wait()
	prom.waitScraped(t, replicas[0], admin(replicas[0]))
	end := time.Now()
	t.Logf("run %s: Redis down %s (killed at +%s); client saw %d interactive and %d bulk forwarded, refusals %v, cancelled %v, other %v",
		end.Sub(start).Round(time.Second), restarted.Sub(killed).Round(time.Millisecond), killed.Sub(start).Round(time.Second),
		out.ok["interactive"], out.ok["bulk"], out.refused, out.cancelled, out.other)

	checkEveryPanel(t, prom, start, end)

	// The counts Prometheus holds are the clients' counts.
	run := fmt.Sprintf("[%ds]", int(end.Sub(start).Seconds())+5)
	last := func(expr string) float64 {
		return prom.scalar(t, fmt.Sprintf("sum(max_over_time(%s%s))", expr, run), end)
	}
	forwarded := last(`meterproxy_requests_total{job="meterproxy",outcome="forwarded",code=~"2.."}`)
	if want := float64(out.ok["interactive"] + out.ok["bulk"]); forwarded != want {
		t.Errorf("Prometheus: %v forwarded with 2xx; the clients got %v", forwarded, want)
	}
	refusedMaxWait := last(`meterproxy_refusals_total{job="meterproxy",class="bulk",reason="max_wait_exceeded"}`) +
		last(`meterproxy_refusals_total{job="meterproxy",class="bulk",reason="caller_cap_exceeded"}`)
	if want := float64(out.refused["bulk"]["max_wait_exceeded"] + out.refused["bulk"]["caller_cap_exceeded"]); refusedMaxWait != want || want == 0 {
		t.Errorf("Prometheus: %v bulk refused at max_wait or the cap; the clients saw %v (want some)", refusedMaxWait, want)
	}
	t.Logf("Prometheus: %v forwarded with 2xx, %v bulk refused at max_wait or the cap (the clients' counts)", forwarded, refusedMaxWait)
	// Degraded seconds: the outage, read from the store-mode panel's series.
	degraded := prom.scalar(t, fmt.Sprintf(`count_over_time((max(meterproxy_store_degraded{job="meterproxy"}) == 1)%s)`, strings.TrimSuffix(run, "]")+":1s]"), end)
	if lo, hi := outage.Seconds()-2, restarted.Sub(killed).Seconds()+4; degraded < lo || degraded > hi {
		t.Errorf("store degraded for %v s by Prometheus; Redis was down %s", degraded, restarted.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("Prometheus: store degraded %v s of a %s outage", degraded, restarted.Sub(killed).Round(time.Millisecond))
	if n := last(`meterproxy_store_call_duration_seconds_count{job="meterproxy",result="error"}`); n == 0 {
		t.Error("no failed store call in the latency histogram, though Redis was down")
	}
	if n := last(`meterproxy_store_errors_total{job="meterproxy"}`); n == 0 {
		t.Error("no store error counted, though Redis was down")
	}
	// The window never held more than the limits say; the limits are the
	// configured ones (the account's pool: the adaptive one has none).
	for class, want := range map[string]float64{"interactive": rpm / 60, "bulk": (rpm - 0.3*rpm) / 60} {
		if got := prom.scalar(t, fmt.Sprintf(`max(meterproxy_limit_requests_per_second{job="meterproxy",pool="default",class=%q})`, class), end); got != want {
			t.Errorf("%s limit %v a second, configured %v", class, got, want)
		}
	}
	for _, s := range prom.query(t, `sum(max by (class) (meterproxy_window_used_requests{job="meterproxy"})) > 10 + 1`, start, end) {
		t.Errorf("window use above the account's 10 a second: %v", s.values)
	}
	for _, s := range prom.query(t, `sum(meterproxy_in_flight{job="meterproxy"}) > 20`, start, end) {
		t.Errorf("in flight above the bound of %d: %v", inFlight, s.values)
	}
	// Admitted waits stay within max_wait (and the bucket it sits in),
	// the refusals apart.
	for _, s := range prom.query(t, fmt.Sprintf(`histogram_quantile(0.99, sum by (class, le) (rate(meterproxy_queue_wait_seconds_bucket{job="meterproxy",outcome="admitted"}[5s]))) > %v`, waitEdge), start, end) {
		t.Errorf("admitted %s wait p99 above max_wait %s (past the bucket's edge, %v s): %v", s.labels["class"], maxWait, waitEdge, s.values)
		for _, b := range prom.query(t, fmt.Sprintf(`sum by (le) (increase(meterproxy_queue_wait_seconds_bucket{job="meterproxy",outcome="admitted",class=%q}%s))`, s.labels["class"], run), time.Time{}, end) {
			t.Logf("admitted %s waits at or below %s s over the run: %v", s.labels["class"], b.labels["le"], b.values)
		}
	}
	// The fleet's in-flight count reads the requests in flight, not the
	// slots replicas took ahead of demand: on average within three of the
	// replicas' own counts summed (each replica is scraped at its own
	// moment of a bursty second, and sees the other's count as last
	// reported; TestFleetInFlightReadsRequests checks one replica exactly).
	if gap := prom.scalar(t, `avg_over_time((sum(max by (class) (meterproxy_fleet_in_flight{job="meterproxy"})) - sum(meterproxy_in_flight{job="meterproxy"}))`+
		strings.TrimSuffix(run, "]")+`:1s])`, end); gap > 3 {
		t.Errorf("meterproxy_fleet_in_flight reads %.1f above the replicas' own counts on average", gap)
	} else {
		t.Logf("Prometheus: fleet in flight minus the replicas' own counts, averaged over the run: %.2f", gap)
	}
	// The capped caller's requests upstream, summed over the replicas,
	// never read above its cap (sampled each second, 50 ms requests may
	// read 0).
	if peak := prom.scalar(t, `max_over_time(sum(meterproxy_caller_in_flight{job="meterproxy",caller="nightly-import"})`+strings.TrimSuffix(run, "]")+`:1s])`, end); peak > 8 {
		t.Errorf("nightly-import peaked at %v upstream by Prometheus; want it within its cap of 8", peak)
	}
	// The in-flight bound drops to the replica's own while Redis is bypassed.
	if lo, hi := prom.scalar(t, `min(min_over_time(meterproxy_in_flight_limit{job="meterproxy",pool="default"}`+run+`))`, end),
		prom.scalar(t, `max(max_over_time(meterproxy_in_flight_limit{job="meterproxy",pool="default"}`+run+`))`, end); lo != inFlight/2 || hi != inFlight {
		t.Errorf("in-flight bound read %v to %v; want the fleet's %d, and each replica's %d while degraded", lo, hi, inFlight, inFlight/2)
	}
	if up := prom.scalar(t, fmt.Sprintf(`up{instance=%q}`, admin(replicas[1])), end); up != 0 {
		t.Errorf("the drained replica reads up %v at the end", up)
	}
	checkAlertRules(t, prom, end)
}

// checkEveryPanel evaluates every target of the dashboard over [from, to],
// Grafana's variables substituted, and requires each to return data.
func checkEveryPanel(t *testing.T, prom *promServer, from, to time.Time) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	repl := strings.NewReplacer("$job", "meterproxy", "$account", ".*", "$pool", ".*", "$__rate_interval", "5s",
		"$__range", fmt.Sprintf("%ds", int(to.Sub(from).Seconds())))
	n := 0
	for _, p := range flattenPanels(d.Panels) {
		for _, tg := range p.Targets {
			n++
			expr := repl.Replace(tg.Expr)
			series := prom.query(t, expr, from, to)
			if len(series) == 0 {
				t.Errorf("panel %q target %s returned no data: %s", p.Title, tg.RefID, expr)
				continue
			}
			finite := false
			for _, s := range series {
				for _, v := range s.values {
					finite = finite || !math.IsNaN(v)
				}
			}
			if !finite {
				t.Errorf("panel %q target %s: only NaN over the run: %s", p.Title, tg.RefID, expr)
			}
		}
	}
	t.Logf("evaluated %d dashboard targets on Prometheus", n)
}

// checkAlertRules: every alert rule loads and evaluates without error, and
// InteractiveRefused and Upstream429s, which the run gives no cause for,
// do not fire.
func checkAlertRules(t *testing.T, prom *promServer, at time.Time) {
	t.Helper()
	res, err := http.Get(prom.url + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var body struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range body.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "charts", "meterproxy", "rules", "meterproxy-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Count(string(raw), "- alert: "); n != want {
		t.Errorf("Prometheus loaded %d rules, the rules file has %d", n, want)
	}
	for _, name := range []string{"InteractiveRefused", "Upstream429s"} {
		if s := prom.query(t, fmt.Sprintf(`ALERTS{alertname=%q}`, name), time.Time{}, at); len(s) > 0 {
			t.Errorf("%s is %s with no cause in the run: %v", name, s[0].labels["alertstate"], s[0].labels)
		}
	}
}
