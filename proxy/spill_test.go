package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// accountServer is an upstream account that answers every request with
// status (429 with a retry hint, or 200 with a chat completion) and
// records the credentials it was sent.
type accountServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newAccountServer(t *testing.T, status int) *accountServer {
	s := &accountServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *accountServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// spillProxy is a proxy in front of accounts ptu and paygo, in that order,
// both serving interactive, for one interactive caller.
func spillProxy(t *testing.T, ptu, paygo *accountServer) *testProxy {
	both := []classify.Class{classify.Interactive, classify.Bulk}
	accounts := []Account{
		{URL: ptu.URL, APIKeyEnv: "PTU_KEY", Account: quota.Account{Name: "ptu", Serves: both, Account: quota.AccountConfig{RequestsPerMinute: 6000, MaxInFlight: 10}}},
		{URL: paygo.URL, APIKeyEnv: "PAYGO_KEY", Account: quota.Account{Name: "paygo", Serves: both, Account: quota.AccountConfig{RequestsPerMinute: 6000, MaxInFlight: 10}}},
	}
	return newTestProxy(t, proxyOpts{
		upstream: http.NotFoundHandler(),
		mutate: func(c *Config, q *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			c.Upstream.Accounts = accounts
			q.Accounts = c.Upstream.QuotaAccounts()
			cc.UnknownCallers = classify.UnknownReject
			*callers = []classify.Caller{{Name: "chat", KeyEnv: "CHAT_KEY", Class: classify.Interactive}}
		},
		environ:     map[string]string{"CHAT_KEY": "sk-caller-chat-0123456789"},
		accountKeys: map[string]string{"ptu": "sk-ptu-key", "paygo": "sk-paygo-key"},
	})
}

func postChat(t *testing.T, p *testProxy) (int, []byte) {
	t.Helper()
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	req.Header.Set("Authorization", "Bearer sk-caller-chat-0123456789")
	req.Header.Set("Content-Type", "application/json")
	status, _, body := do(t, req)
	return status, body
}

// spilledOnce checks that one request left the first account (ptu) for
// the next, counted once, and that both accounts' leases were given back.
func spilledOnce(t *testing.T, p *testProxy) {
	t.Helper()
	if n := counterValue(t, p.reg, "meterproxy_account_spills_total", map[string]string{"account": "ptu"}); n != 1 {
		t.Errorf("meterproxy_account_spills_total{account=ptu} = %v, want 1", n)
	}
	waitFor(t, "both leases released", func() bool {
		st := p.admitter.State()
		return st.Pools["ptu/default"].InFlight["interactive"] == 0 && st.Pools["paygo/default"].InFlight["interactive"] == 0
	})
}

// TestSpillMovesA429ToTheNextAccount: the first account's 429 does not
// reach the caller: the request is admitted at the next account and sent
// there with that account's key; the 429 is counted once, as the first
// account's spill.
func TestSpillMovesA429ToTheNextAccount(t *testing.T) {
	ptu, paygo := newAccountServer(t, http.StatusTooManyRequests), newAccountServer(t, http.StatusOK)
	p := spillProxy(t, ptu, paygo)
	if status, body := postChat(t, p); status != http.StatusOK {
		t.Fatalf("caller got %d %s, want the next account's 200", status, body)
	}
	if got := ptu.seen(); len(got) != 1 || got[0] != "Bearer sk-ptu-key" {
		t.Errorf("the PTU saw %d requests, want one with its own key", len(got))
	}
	if got := paygo.seen(); len(got) != 1 || got[0] != "Bearer sk-paygo-key" {
		t.Errorf("pay-as-you-go saw %d requests, want one with its own key", len(got))
	}
	if n := counterValue(t, p.reg, "meterproxy_upstream_429_total", nil); n != 1 {
		t.Errorf("meterproxy_upstream_429_total = %v, want 1", n)
	}
	spilledOnce(t, p)
}

// TestSpillPassesTheLast429On: when every account the class may go to
// refused, the caller gets the last 429; each refusal is counted once.
func TestSpillPassesTheLast429On(t *testing.T) {
	ptu, paygo := newAccountServer(t, http.StatusTooManyRequests), newAccountServer(t, http.StatusTooManyRequests)
	p := spillProxy(t, ptu, paygo)
	if status, body := postChat(t, p); status != http.StatusTooManyRequests {
		t.Fatalf("caller got %d %s, want the last account's 429", status, body)
	}
	if n := counterValue(t, p.reg, "meterproxy_upstream_429_total", nil); n != 2 {
		t.Errorf("meterproxy_upstream_429_total = %v, want 2 (one per account)", n)
	}
	if n := counterValue(t, p.reg, "meterproxy_account_spills_total", map[string]string{"account": "ptu"}); n != 1 {
		t.Errorf("meterproxy_account_spills_total = %v, want 1 (ptu's)", n)
	}
	if len(ptu.seen()) != 1 || len(paygo.seen()) != 1 {
		t.Errorf("sent %d to the PTU and %d to pay-as-you-go, want one each", len(ptu.seen()), len(paygo.seen()))
	}
}

// TestSpillMovesADialFailureToTheNextAccount: an account no connection
// can be made to (its upstream down, a name that does not resolve) never
// saw the request, so it goes to the next account like a 429 does, instead
// of a 502 while another account has room; counted once as the first
// account's spill, and both leases are given back.
func TestSpillMovesADialFailureToTheNextAccount(t *testing.T) {
	down, paygo := newAccountServer(t, http.StatusOK), newAccountServer(t, http.StatusOK)
	down.Close() // its port refuses connections from now on
	p := spillProxy(t, down, paygo)
	if status, body := postChat(t, p); status != http.StatusOK {
		t.Fatalf("caller got %d %s, want the next account's 200", status, body)
	}
	if got := paygo.seen(); len(got) != 1 || got[0] != "Bearer sk-paygo-key" {
		t.Errorf("pay-as-you-go saw %d requests, want one with its own key", len(got))
	}
	spilledOnce(t, p)
}

// TestSpillPassesTheLastDialFailureOn: when no account can be reached, the
// caller gets 502 upstream_unreachable, as with one account.
func TestSpillPassesTheLastDialFailureOn(t *testing.T) {
	a, b := newAccountServer(t, http.StatusOK), newAccountServer(t, http.StatusOK)
	a.Close()
	b.Close()
	p := spillProxy(t, a, b)
	status, body := postChat(t, p)
	if status != http.StatusBadGateway || !strings.Contains(string(body), "upstream_unreachable") {
		t.Fatalf("caller got %d %s, want 502 upstream_unreachable", status, body)
	}
	spilledOnce(t, p)
}

// TestSpillMovableDialFailure: a failed dial moves the request, unless the
// dial failed because the request's client left; a failure after the
// request was written never moves it.
func TestSpillMovableDialFailure(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	ex := &exchange{}
	live := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	gone := live.WithContext(ctx)
	cases := []struct {
		name string
		r    *http.Request
		err  error
		want bool
	}{
		{"refused dial", live, dial, true},
		{"dial cut by a client that left", gone, &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, false},
		{"reset after the request was written", live, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
	}
	for _, c := range cases {
		if got := movable(c.r, nil, c.err, ex); got != c.want {
			t.Errorf("%s: movable %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSpillUnreachableIsSummarised: many moves from an account that is
// down log a bounded number of account_unreachable lines, each saying how
// many moves it stands for, and every move is still counted.
func TestSpillUnreachableIsSummarised(t *testing.T) {
	down, paygo := newAccountServer(t, http.StatusOK), newAccountServer(t, http.StatusOK)
	down.Close()
	p := spillProxy(t, down, paygo)
	const moves = 44
	for range moves {
		if status, body := postChat(t, p); status != http.StatusOK {
			t.Fatalf("caller got %d %s, want the next account's 200", status, body)
		}
	}
	if n := counterValue(t, p.reg, "meterproxy_account_spills_total", map[string]string{"account": "ptu"}); n != moves {
		t.Errorf("meterproxy_account_spills_total{account=ptu} = %v, want %d", n, moves)
	}
	lines := strings.Count(p.logs.String(), `"msg":"account_unreachable"`)
	if lines < 1 || lines > 2 {
		t.Errorf("%d account_unreachable lines for %d moves within a minute, want one:\n%s", lines, moves, p.logs.String())
	}
}

// TestUnreachableLogCounts: over five minutes of moves a second, a line a
// minute, the lines standing for every move once flushed.
func TestUnreachableLogCounts(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	now := time.Unix(1_700_000_000, 0)
	u := unreachableLog{now: func() time.Time { return now }}
	const moves = 300
	for range moves {
		u.warn(log, "ptu", errors.New("dial tcp: connection refused"))
		now = now.Add(time.Second)
	}
	total, lines := 0, 0
	for line := range strings.Lines(buf.String()) {
		var rec struct{ Suppressed int }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		total += 1 + rec.Suppressed
		lines++
	}
	if lines > 6 {
		t.Errorf("%d lines for five minutes of moves, want about one a minute", lines)
	}
	if total > moves || total < moves-60 { // the last minute's are counted until the next line
		t.Errorf("the lines stand for %d moves of %d", total, moves)
	}
}
