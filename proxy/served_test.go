package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// seenAt is an upstream account that answers every request as its
// provider's API would (a chat completion, an Anthropic message) and
// records the path and credential headers of each.
type seenAt struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
	path []string
}

func newSeenAt(t *testing.T) *seenAt {
	s := &seenAt{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen, s.path = append(s.seen, r.Header.Clone()), append(s.path, r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			_, _ = w.Write([]byte(`{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4","content":[],"usage":{"input_tokens":5,"output_tokens":2}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *seenAt) got() ([]http.Header, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.seen...), append([]string(nil), s.path...)
}

// providerAccounts is a proxy whose upstream.accounts are one account of
// each of providers (named; the fakes' hosts tell nothing), each serving
// both classes, with one configured caller.
func providerAccounts(t *testing.T, providers ...Provider) (*testProxy, map[Provider]*seenAt) {
	at := map[Provider]*seenAt{}
	var accounts []Account
	keys := map[string]string{}
	for _, p := range providers {
		at[p] = newSeenAt(t)
		name := string(p) + "-acct"
		keys[name] = "sk-" + name + "-key"
		accounts = append(accounts, Account{URL: at[p].srv.URL, Provider: p, APIKeyEnv: strings.ToUpper(string(p)) + "_KEY",
			Account: quota.Account{Name: name, Serves: []classify.Class{classify.Interactive, classify.Bulk},
				Account: quota.AccountConfig{RequestsPerMinute: 6000, MaxInFlight: 10}}})
	}
	p := newTestProxy(t, proxyOpts{
		upstream: http.NotFoundHandler(),
		mutate: func(c *Config, q *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			c.Upstream.Accounts = accounts
			q.Accounts = c.Upstream.QuotaAccounts()
			q.Classes.Bulk.MaxWait = time.Second
			cc.UnknownCallers = classify.UnknownReject
			*callers = []classify.Caller{{Name: "app", KeyEnv: "APP_KEY", Class: classify.Interactive}}
		},
		environ:     map[string]string{"APP_KEY": "sk-caller-app-0123456789"},
		accountKeys: keys,
	})
	return p, at
}

// TestAccountsOfSeveralProviders: accounts of OpenAI, Azure, Anthropic and
// Gemini
// behind one proxy — each SDK family's request reaches only its
// provider's account, with only that account's key, in the header that
// provider reads; the caller's key reaches none.
func TestAccountsOfSeveralProviders(t *testing.T) {
	p, at := providerAccounts(t, "openai", "azure", "anthropic", "gemini")
	tests := []struct {
		path, body string
		to         Provider
		header     string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "openai", "Authorization"},
		{"/openai/deployments/gpt-4o/chat/completions", `{"messages":[]}`, "azure", "Api-Key"},
		{"/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "azure", "Api-Key"},
		{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":10,"messages":[]}`, "anthropic", "X-Api-Key"},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[]}`, "gemini", "X-Goog-Api-Key"},
		{"/v1beta/openai/chat/completions", `{"model":"gemini-2.5-flash","messages":[]}`, "gemini", "Authorization"},
	}
	for _, tt := range tests {
		req := newRequest(t, http.MethodPost, p.URL+tt.path, tt.body)
		req.Header.Set("Authorization", "Bearer sk-caller-app-0123456789")
		if status, _, b := do(t, req); status != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.path, status, b)
		}
	}
	for _, tt := range tests {
		want := 0
		for _, u := range tests {
			if u.to == tt.to {
				want++
			}
		}
		seen, paths := at[tt.to].got()
		if len(seen) != want {
			t.Errorf("%s's account saw %d requests %v, want %d", tt.to, len(seen), paths, want)
		}
		key := "sk-" + string(tt.to) + "-acct-key"
		for i, h := range seen {
			var header string // the row's whose path it was
			for _, u := range tests {
				if strings.HasPrefix(u.path, paths[i]) {
					header = u.header
				}
			}
			if got := strings.TrimPrefix(h.Get(header), "Bearer "); got != key {
				t.Errorf("%s's account: %s on %s = %q, want its own key", tt.to, header, paths[i], got)
			}
			for _, other := range []string{"Authorization", "Api-Key", "X-Api-Key", "X-Goog-Api-Key"} {
				if other != header && h.Get(other) != "" {
					t.Errorf("%s's account was sent %s too on %s", tt.to, other, paths[i])
				}
			}
		}
	}
}

// TestAccountsNoneServesThePath: a path whose provider no account is of
// is refused 404 no_account, in that API's error shape, naming the path
// and the accounts, counted, and sent nowhere.
func TestAccountsNoneServesThePath(t *testing.T) {
	p, at := providerAccounts(t, "openai", "anthropic")
	req := newRequest(t, http.MethodPost, p.URL+"/openai/deployments/gpt-4o/chat/completions", `{"messages":[]}`)
	req.Header.Set("Authorization", "Bearer sk-caller-app-0123456789")
	status, _, b := do(t, req)
	if status != http.StatusNotFound || !strings.Contains(string(b), `"code":"no_account"`) ||
		!strings.Contains(string(b), "/openai/deployments/gpt-4o/chat/completions") ||
		!strings.Contains(string(b), "openai-acct (openai), anthropic-acct (anthropic)") {
		t.Fatalf("Azure path with no Azure account: %d %s, want 404 no_account naming the path and the accounts", status, b)
	}
	for name, s := range at {
		if seen, paths := s.got(); len(seen) != 0 {
			t.Errorf("%s's account was sent %v", name, paths)
		}
	}
	if n := sumSeries(t, p, "meterproxy_refusals_total", map[string]string{"reason": "no_account"}); n != 1 {
		t.Errorf("meterproxy_refusals_total{reason=no_account} = %v, want 1", n)
	}
}
