package test

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// fleetInfo is what a replica says it runs: in /admin/state, in its
// starting log line, and in meterproxy_build_info and
// meterproxy_config_info.
type fleetInfo struct {
	State struct {
		ConfigVersion string `json:"config_version"`
		ConfigHash    string `json:"config_hash"`
		Mode          string `json:"mode"`
	}
	Starting struct {
		Version    string `json:"version"`
		GoVersion  string `json:"goversion"`
		ConfigHash string `json:"config_hash"`
		Mode       string `json:"mode"`
	}
	// build and config are the labels of the one series of
	// meterproxy_build_info and of meterproxy_config_info.
	build, config map[string]string
}

func readFleetInfo(t *testing.T, p *procs.Proxy) fleetInfo {
	t.Helper()
	var fi fleetInfo
	res, err := http.Get(p.AdminURL + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := json.NewDecoder(res.Body).Decode(&fi.State); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(p.Logs()) {
		if strings.Contains(line, `"msg":"starting"`) && json.Unmarshal([]byte(line), &fi.Starting) == nil {
			break
		}
	}
	m := scrape(t, p.AdminURL)
	for name, into := range map[string]*map[string]string{"meterproxy_build_info": &fi.build, "meterproxy_config_info": &fi.config} {
		series := m[name].GetMetric()
		if len(series) != 1 || series[0].GetGauge().GetValue() != 1 {
			t.Fatalf("%s: %d series, want one of value 1", name, len(series))
		}
		*into = map[string]string{}
		for _, lp := range series[0].GetLabel() {
			(*into)[lp.GetName()] = lp.GetValue()
		}
	}
	return fi
}

// TestFleetSaysWhatItRuns: issue 37 (item 5). Two replicas of one
// configuration that differ in their listen addresses and log level say
// the same build (the stamped version and the Go version) and the same
// config hash, in their starting line, /admin/state and their metrics,
// and that they enforce; a third whose limit differs says another hash.
func TestFleetSaysWhatItRuns(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{}))
	a := baseConfig(up.URL)
	a.withCallers()
	a.set("account.requests_per_minute", 600)
	b := baseConfig(up.URL)
	b.withCallers()
	b.set("account.requests_per_minute", 600)
	b.set("server.listen", "localhost:0")
	b.set("server.admin_listen", "localhost:0")
	b.set("log.level", "info")
	c := baseConfig(up.URL)
	c.withCallers()
	c.set("account.requests_per_minute", 601)
	infos := make([]fleetInfo, 3)
	for i, cfg := range []config{a, b, c} {
		infos[i] = readFleetInfo(t, startProxy(t, cfg, fleetEnv, chatKey, importKey))
	}
	for i, fi := range infos {
		if fi.build["version"] != procs.Version || fi.build["goversion"] != runtime.Version() {
			t.Errorf("replica %d: meterproxy_build_info %v, want version %s, goversion %s", i, fi.build, procs.Version, runtime.Version())
		}
		if fi.Starting.Version != procs.Version || fi.Starting.GoVersion != runtime.Version() {
			t.Errorf("replica %d: starting says version %q, goversion %q; want the build's", i, fi.Starting.Version, fi.Starting.GoVersion)
		}
		if fi.State.Mode != "enforce" || fi.config["mode"] != "enforce" || fi.Starting.Mode != "enforce" {
			t.Errorf("replica %d: mode %q in /admin/state, %q in meterproxy_config_info, %q at start; want enforce",
				i, fi.State.Mode, fi.config["mode"], fi.Starting.Mode)
		}
		if h := fi.State.ConfigHash; len(h) != 12 || fi.config["hash"] != h || fi.Starting.ConfigHash != h {
			t.Errorf("replica %d: config hash %q in /admin/state, %q in meterproxy_config_info, %q at start; want one 12-digit hash",
				i, h, fi.config["hash"], fi.Starting.ConfigHash)
		}
	}
	if infos[0].State.ConfigHash != infos[1].State.ConfigHash {
		t.Errorf("two replicas that differ only in listen addresses and log level have config hashes %s and %s",
			infos[0].State.ConfigHash, infos[1].State.ConfigHash)
	}
	if infos[0].State.ConfigVersion == infos[1].State.ConfigVersion {
		t.Error("config_version, the whole configuration's, is the same for two replicas whose listen addresses differ")
	}
	if infos[2].State.ConfigHash == infos[0].State.ConfigHash {
		t.Errorf("a replica whose limit differs has the fleet's config hash %s", infos[2].State.ConfigHash)
	}
}

// TestDecisionHeadersAndPoolLabels: issue 37 (item 6). An importer that
// claims interactive, which it may not, is answered with the class it
// was counted in (bulk), its account, pool and wait; with
// server.decision_headers: false none of them; and its wait and its
// service time are in meterproxy_queue_wait_seconds and
// meterproxy_upstream_duration_seconds by account and pool.
func TestDecisionHeadersAndPoolLabels(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{}))
	on := baseConfig(up.URL)
	on.withCallers()
	off := baseConfig(up.URL)
	off.withCallers()
	off.set("server.decision_headers", false)
	client := newClient(t, 1)
	claim := map[string]string{"Authorization": "Bearer " + importKey, "X-Meterproxy-Class": "interactive"}
	const body = `{"model":"m","messages":[]}`

	p := startProxy(t, on, fleetEnv, chatKey, importKey)
	status, h, b := post(t, client, p.URL+"/v1/chat/completions", body, claim)
	if status != http.StatusOK {
		t.Fatalf("status %d %s", status, b)
	}
	for k, want := range map[string]string{"X-Meterproxy-Class": "bulk", "X-Meterproxy-Account": "default", "X-Meterproxy-Pool": "default"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if _, err := strconv.Atoi(h.Get("X-Meterproxy-Queue-Ms")); err != nil {
		t.Errorf("X-Meterproxy-Queue-Ms: %q, want whole milliseconds", h.Get("X-Meterproxy-Queue-Ms"))
	}
	at := map[string]string{"account": "default", "pool": "default", "class": "bulk"}
	waitFor(t, "the request's service time by account and pool", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_upstream_duration_seconds", at) == 1
	})
	m := scrape(t, p.AdminURL)
	if n := sum(m, "meterproxy_queue_wait_seconds", map[string]string{"account": "default", "pool": "default", "class": "bulk", "outcome": "admitted"}); n != 1 {
		t.Errorf("meterproxy_queue_wait_seconds by account and pool counts %v, want 1", n)
	}

	q := startProxy(t, off, fleetEnv, chatKey, importKey)
	status, h, b = post(t, client, q.URL+"/v1/chat/completions", body, claim)
	if status != http.StatusOK {
		t.Fatalf("status %d %s", status, b)
	}
	for _, k := range []string{"X-Meterproxy-Class", "X-Meterproxy-Account", "X-Meterproxy-Pool", "X-Meterproxy-Queue-Ms"} {
		if v := h.Values(k); len(v) > 0 {
			t.Errorf("%s: %q with server.decision_headers: false", k, v)
		}
	}
}
