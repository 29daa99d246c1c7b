package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// A pool's tokens_per_minute holds at the upstream whether the token
// limit is set on the account, on a model's pool, on both or on neither
// (issue 22): the proxy charges every request what its provider would,
// and quota alone decides what that costs in the request's pool.

// poolLoad is one pool's traffic and its limits: where requests for it
// go and what the upstream must see of it.
type poolLoad struct {
	// pool names the pool; model is what its requests name (the body's
	// model, or the Azure deployment when azure).
	pool, model string
	azure       bool
	// rpm and tpm are the pool's limits (tpm 0: not enforced): the upstream
	// must receive tpm/60 tokens a second, or rpm/60 requests a second
	// without a token limit.
	rpm, tpm int
	// maxTokens is what each request asks for.
	maxTokens int
}

// path and body are a request for l.
func (l poolLoad) request() (path, body string) {
	msgs := `"messages":[{"role":"user","content":"count the tokens"}]`
	if l.azure {
		return "/openai/deployments/" + l.model + "/chat/completions?api-version=2024-10-21",
			fmt.Sprintf(`{"max_tokens":%d,%s}`, l.maxTokens, msgs)
	}
	return "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":%d,%s}`, l.model, l.maxTokens, msgs)
}

// providerCharge is what the provider charges a request on path with body
// to its tokens per minute, as docs/providers.md says (and independently of
// meterproxy's code): Azure the prompt plus max_tokens, OpenAI the larger
// of max_tokens and the prompt; the prompt is a quarter of the body's
// bytes, rounded up.
func providerCharge(path string, body []byte) int64 {
	prompt, out := int64(len(body)+3)/4, gjson.GetBytes(body, "max_tokens").Int()
	if strings.HasPrefix(path, "/openai/") {
		return prompt + out
	}
	return max(prompt, out)
}

// upstreamModel is the model or deployment a request reached the upstream for.
func upstreamModel(r fakeprovider.Request) string {
	if rest, ok := strings.CutPrefix(r.Path, "/openai/deployments/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	return gjson.GetBytes(r.Body, "model").String()
}

// runPoolLoad sends interactive requests for every load through urls
// (workers per load and replica, back to back) for runFor, and returns
// the seconds wholly inside the run.
func runPoolLoad(t *testing.T, urls []string, loads []poolLoad, runFor time.Duration) (from, to int64) {
	t.Helper()
	const workers = 4
	client := newClient(t, 64)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(runFor)
	for _, l := range loads {
		path, body := l.request()
		for _, u := range urls {
			for range workers {
				wg.Go(func() {
					for time.Now().Before(stop) {
						sendOnce(ctx, t, client, u+path, body)
					}
				})
			}
		}
	}
	time.AfterFunc(time.Until(stop), cancel) // requests still queued at the end are cancelled by their client
	wg.Wait()
	return start.Unix() + 1, stop.Unix() - 1
}

// sendOnce sends one request as chat-frontend (interactive) and reads the
// answer whatever it is: refusals and cancellations are part of the load.
func sendOnce(ctx context.Context, t *testing.T, client *http.Client, url, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+chatKey)
	res, err := client.Do(req)
	if err != nil {
		return // cancelled at the end of the run
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
}

// checkPoolUpstream: over the whole seconds from..to, the upstream
// received each pool's allowance ± one second's allowance: tokens as the
// provider charges them for a pool with a token limit, requests for one
// without.
func checkPoolUpstream(t *testing.T, reqs []fakeprovider.Request, loads []poolLoad, from, to int64) {
	t.Helper()
	tokens, requests := map[string]int64{}, map[string]int64{}
	for _, r := range reqs {
		if s := r.Arrived.Unix(); s >= from && s <= to {
			m := upstreamModel(r)
			tokens[m] += providerCharge(r.Path, r.Body)
			requests[m]++
		}
	}
	secs := float64(to - from + 1)
	for _, l := range loads {
		got, perMinute, kind := float64(requests[l.model]), float64(l.rpm), "requests"
		if l.tpm > 0 {
			got, perMinute, kind = float64(tokens[l.model]), float64(l.tpm), "tokens"
		}
		perSecond := perMinute / 60
		if want := secs * perSecond; got < want-perSecond || got > want+perSecond {
			t.Errorf("pool %s: the upstream received %.0f %s in %.0f whole seconds (%.1f a second; %d requests, %d tokens), want %.0f ± %.0f (%s a minute: %.0f)",
				l.pool, got, kind, secs, got/secs, requests[l.model], tokens[l.model], want, perSecond, kind, perMinute)
		}
	}
}

// poolProxiesOf starts replicas meterproxy replicas of cfg in front of
// upURL: one in process, or a fleet sharing srv.
func poolProxiesOf(t *testing.T, cfg config, srv *redistest.Server, replicas int) []string {
	t.Helper()
	cfg.set("log.level", "info")
	cfg.withCallers()
	if replicas > 1 {
		cfg.set("store.redis_url", srv.URL())
		cfg.set("store.key_prefix", redistest.Prefix(t))
		cfg.set("store.timeout", "1s") // about charging, not Redis faults
		cfg.set("store.heartbeat", "500ms")
		cfg.set("account.expected_replicas", replicas)
	}
	ps := make([]*procs.Proxy, replicas)
	for i := range ps {
		ps[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey)
	}
	return urlsOf(ps)
}

// TestPoolTokensREADMEExamples: the documentation's own account.models
// examples (OpenAI's and Azure's, under "Limits per model" in
// docs/limits.md), served as written, hold each pool's tokens a second at
// the upstream. They are read from docs/limits.md, so the test follows the
// documentation.
func TestPoolTokensREADMEExamples(t *testing.T) {
	root, err := procs.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	limits, err := os.ReadFile(filepath.Join(root, "docs", "limits.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []struct{ name, after string }{
		{"openai", "OpenAI, a chat model and a cheaper one"},
		{"azure", "Azure OpenAI, one pool per deployment"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel() // a fake and a proxy each: the two examples side by side
			example := limitsYAML(t, limits, "## Limits per model", ex.after)
			fake := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond, RecordBodies: true})
			up := startUpstream(t, fake)
			cfg := baseConfig(up.URL)
			for k, v := range example {
				cfg[k] = v
			}
			azure := strings.Contains(fmt.Sprint(example["upstream"]), "openai.azure.com")
			cfg.set("upstream.url", up.URL) // the example's provider, played by the fake
			if !azure {
				cfg.set("upstream.provider", "openai") // the example's upstream is api.openai.com, the default
			}
			loads := tokenPools(t, example, azure)
			urls := poolProxiesOf(t, cfg, nil, 1)
			from, to := runPoolLoad(t, urls, loads, 5*time.Second)
			checkPoolUpstream(t, fake.Requests(), loads, from, to)
		})
	}
}

// limitsYAML is the first ```yaml block of docs/limits.md (limits) after
// the line starting with after, within the section headed section.
func limitsYAML(t *testing.T, limits []byte, section, after string) map[string]any {
	t.Helper()
	_, rest, ok := bytes.Cut(limits, []byte("\n"+section+"\n"))
	if !ok {
		t.Fatalf("docs/limits.md has no section %q", section)
	}
	_, rest, ok = bytes.Cut(rest, []byte("\n"+after))
	if !ok {
		t.Fatalf("docs/limits.md's %q has no line starting %q", section, after)
	}
	_, rest, ok = bytes.Cut(rest, []byte("```yaml\n"))
	block, _, closed := bytes.Cut(rest, []byte("```"))
	if !ok || !closed {
		t.Fatalf("docs/limits.md has no yaml block after %q", after)
	}
	var m map[string]any
	if err := yaml.Unmarshal(block, &m); err != nil {
		t.Fatalf("docs/limits.md's yaml after %q: %v", after, err)
	}
	return m
}

// tokenPools are the loads of example's pools with a token limit: each
// request is charged a fifth of a second's tokens, so tokens bind well
// before the pool's requests do.
func tokenPools(t *testing.T, example map[string]any, azure bool) []poolLoad {
	t.Helper()
	b, err := yaml.Marshal(example["account"])
	if err != nil {
		t.Fatal(err)
	}
	var account struct {
		Models []struct {
			Name  string   `yaml:"name"`
			Match []string `yaml:"match"`
			RPM   int      `yaml:"requests_per_minute"`
			TPM   int      `yaml:"tokens_per_minute"`
		} `yaml:"models"`
	}
	if err := yaml.Unmarshal(b, &account); err != nil {
		t.Fatal(err)
	}
	var loads []poolLoad
	for _, m := range account.Models {
		if m.TPM <= 0 {
			continue
		}
		l := poolLoad{pool: m.Name, model: strings.ReplaceAll(m.Match[0], "*", "x"), azure: azure, rpm: m.RPM, tpm: m.TPM, maxTokens: m.TPM / 300}
		if perRequest := m.TPM / m.RPM; l.maxTokens < 2*perRequest {
			t.Fatalf("pool %s: requests of %d tokens would not make its tokens bind before its requests", m.Name, l.maxTokens)
		}
		loads = append(loads, l)
	}
	if len(loads) == 0 {
		t.Fatal("the documentation's example has no pool with a token limit")
	}
	return loads
}
