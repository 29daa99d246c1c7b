package proxy

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// lowAccount is an upstream account that answers every request 200 and
// reports, on OpenAI's headers, a tenth of its requests left: below the
// default interactive reserve (0.3), for a minute. It counts what it
// was sent.
func lowAccount(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("x-ratelimit-limit-requests", "100")
		h.Set("x-ratelimit-remaining-requests", "10")
		h.Set("x-ratelimit-reset-requests", "60s")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	}))
	t.Cleanup(s.Close)
	return s, &n
}

// TestAccountsHeaderHoldPerAccount: the provider's word holds bulk below
// the interactive reserve only at an account that has interactive to
// protect. With chat serving interactive (and lending to bulk) and batch
// serving bulk alone, both reporting a tenth left: chat's answer holds
// bulk there, batch's does not, so bulk keeps going to batch. The reserve
// is quota's, per account (Admitter.HeaderReserve); the proxy once used
// classes.interactive.reserve everywhere, and held batch too — then the
// second bulk request found both accounts held and waited out max_wait.
func TestAccountsHeaderHoldPerAccount(t *testing.T) {
	chat, chatN := lowAccount(t)
	batch, batchN := lowAccount(t)
	accounts := []Account{
		{URL: chat.URL, APIKeyEnv: "CHAT_ACCT_KEY", Account: quota.Account{Name: "chat", Serves: []classify.Class{classify.Interactive},
			LendsTo: []classify.Class{classify.Bulk}, Account: quota.AccountConfig{RequestsPerMinute: 6000, MaxInFlight: 10}}},
		{URL: batch.URL, APIKeyEnv: "BATCH_ACCT_KEY", Account: quota.Account{Name: "batch", Serves: []classify.Class{classify.Bulk},
			Account: quota.AccountConfig{RequestsPerMinute: 6000, MaxInFlight: 10}}},
	}
	p := newTestProxy(t, proxyOpts{
		upstream: http.NotFoundHandler(),
		mutate: func(c *Config, q *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			c.Upstream.Accounts = accounts
			q.Accounts = c.Upstream.QuotaAccounts()
			q.Classes.Bulk.MaxWait = time.Second // a held bulk request is refused soon
			cc.UnknownCallers = classify.UnknownReject
			*callers = []classify.Caller{
				{Name: "app", KeyEnv: "APP_KEY", Class: classify.Interactive},
				{Name: "import", KeyEnv: "IMPORT_KEY", Class: classify.Bulk},
			}
		},
		environ:     map[string]string{"APP_KEY": "sk-caller-app-0123456789", "IMPORT_KEY": "sk-caller-import-0123456789"},
		accountKeys: map[string]string{"chat": "sk-chat-key", "batch": "sk-batch-key"},
	})
	post := func(key string) (int, []byte) {
		req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		status, _, body := do(t, req)
		return status, body
	}
	if got := p.admitter.HeaderReserve("chat"); got != 0.3 {
		t.Errorf("HeaderReserve(chat) = %v, want classes.interactive.reserve (0.3)", got)
	}
	if got := p.admitter.HeaderReserve("batch"); got != 0 {
		t.Errorf("HeaderReserve(batch) = %v, want 0: it serves bulk alone", got)
	}
	if status, body := post("sk-caller-import-0123456789"); status != http.StatusOK || batchN.Load() != 1 {
		t.Fatalf("first bulk request: %d %s, batch saw %d; want 200 at batch", status, body, batchN.Load())
	}
	if status, body := post("sk-caller-app-0123456789"); status != http.StatusOK || chatN.Load() != 1 {
		t.Fatalf("interactive request: %d %s, chat saw %d; want 200 at chat", status, body, chatN.Load())
	}
	waitFor(t, "chat's answer holds bulk at chat", func() bool {
		return p.admitter.State().Pools["chat/default"].UpstreamHoldSeconds > 0
	})
	if status, body := post("sk-caller-import-0123456789"); status != http.StatusOK {
		t.Fatalf("second bulk request: %d %s; want 200: batch has no interactive reserve to hold bulk for", status, body)
	}
	if batchN.Load() != 2 || chatN.Load() != 1 {
		t.Errorf("batch saw %d, chat %d; want bulk at batch (2), chat only interactive (1)", batchN.Load(), chatN.Load())
	}
	if h := p.admitter.State().Pools["batch/default"].UpstreamHoldSeconds; h != 0 {
		t.Errorf("batch held bulk %vs on the provider's word; want 0", h)
	}
}
