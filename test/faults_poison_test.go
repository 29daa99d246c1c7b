//go:build faults

package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// Issue 21's bodies at volume, beside the hostile-clients case's good
// traffic: each tries to poison the token windows everyone shares or to
// escape its pool. The case runs with tokens enforced (poisonTPM) and an
// upstream that, like OpenAI, answers an output limit above what a model
// can produce (poisonModelOutput) with 400.
const (
	// poisonTPM is account.tokens_per_minute: a hundred million tokens a
	// second, ten times what the whole mix asks at its pace (its 150 deep
	// bodies of 2 MiB alone, interactive, are charged 78 million tokens
	// within seconds), so any good request refused for tokens was refused
	// for a poisoned window; one request may be charged at most this (the
	// default of account.max_request_tokens), far below 2^48.
	poisonTPM = 6_000_000_000
	// poisonModelOutput is the fake provider's -max-output-tokens.
	poisonModelOutput = 4096
	// poisonBigBody is the size of a body without max_tokens, charged a
	// quarter of it: 262,144 tokens.
	poisonBigBody = 1 << 20
)

// poisonKinds are issue 21's kinds of the volume mix, with how many of
// each.
var poisonKinds = map[string]int{
	"charge-2^48":           60,  // max_tokens 2^48: 400 charge_too_large, charged nothing
	"charge-1e300":          60,  // max_tokens 1e300: the same
	"charge-upstream-400":   100, // max_tokens above the model's: forwarded, the provider's 400, settled to 0
	"big-body":              20,  // 1 MiB without max_tokens: forwarded, charged its size, settled to its usage
	"duplicate-model":       100, // model twice: 400 duplicate_key
	"duplicate-max-tokens":  100, // max_tokens twice: 400 duplicate_key
	"tool-stream-cut":       100, // tool-call arguments streamed and cut: settled to no less than the charge
	"gzip-body":             50,  // Content-Encoding gzip: 415 unsupported_encoding
	"good-bulk-with-output": 100, // nightly-import asking 1000 output tokens: 200
}

var poisonRules = map[string]kindRule{
	"charge-2^48":           {refused: []string{"charge_too_large"}, must: "charge_too_large"},
	"charge-1e300":          {refused: []string{"charge_too_large"}, must: "charge_too_large"},
	"charge-upstream-400":   {forwarded: []string{"4xx"}, must: "4xx"},
	"big-body":              {forwarded: []string{"2xx"}, must: "2xx"},
	"duplicate-model":       {refused: []string{"duplicate_key"}, must: "duplicate_key"},
	"duplicate-max-tokens":  {refused: []string{"duplicate_key"}, must: "duplicate_key"},
	"tool-stream-cut":       {forwarded: []string{"2xx"}, cut: true, must: "2xx"},
	"held-answer":           {forwarded: []string{"2xx"}, must: "2xx"},
	"gzip-body":             {refused: []string{"unsupported_encoding"}, must: "unsupported_encoding"},
	"good-bulk-with-output": {forwarded: []string{"2xx"}, must: "2xx"},
}

// poisonShot is the request of one of poisonKinds, from a bulk caller or
// one no caller has (forwarded as bulk); ok is false for another kind.
func poisonShot(rng *rand.Rand, kind, chat string) (s shot, ok bool) {
	key := importKey
	if rng.IntN(2) == 0 {
		key = fmt.Sprintf("sk-poison-%016x", rng.Uint64())
	}
	h := map[string]string{"Authorization": "Bearer " + key}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	s = shot{url: chat, headers: h}
	switch kind {
	case "charge-2^48":
		s.body = `{"model":"m","max_tokens":281474976710656,` + msgs + `}`
	case "charge-1e300":
		s.body = `{"model":"m","max_tokens":1e300,` + msgs + `}`
	case "charge-upstream-400":
		s.body = fmt.Sprintf(`{"model":"m","max_tokens":%d,`+msgs+`}`, poisonModelOutput+1+rng.IntN(100_000))
	case "big-body":
		pad := strings.Repeat("x", poisonBigBody-64)
		s.body = `{"model":"m","messages":[{"role":"user","content":"` + pad + `"}]}`
	case "duplicate-model":
		s.body = `{"model":"m","model":"gpt-4o",` + msgs + `}`
	case "duplicate-max-tokens":
		s.body = `{"model":"m","max_tokens":1,"max_tokens":8000,` + msgs + `}`
	case "tool-stream-cut":
		s.body = `{"model":"m","stream":true,"max_tokens":50,` + msgs + `}`
		h[fakeprovider.HeaderToolCall], h[fakeprovider.HeaderCutAfter], h[fakeprovider.HeaderReplyBytes] = "true", "3", "80000"
	case "gzip-body":
		s.body = chatBody
		h["Content-Encoding"] = "gzip"
	case "good-bulk-with-output":
		s.body, h["Authorization"] = `{"model":"m","max_tokens":1000,`+msgs+`}`, "Bearer "+importKey
	default:
		return shot{}, false
	}
	return s, true
}

// checkPoisonedWindows requires that the token windows are not poisoned
// after the mix: what the proxy reports used in the current second is no
// more than one minute of the allowance (the most overshoot a second may
// carry), and an interactive request is still admitted at once (recorded
// in l as good-interactive).
func checkPoisonedWindows(t *testing.T, p *procs.Proxy, l *ledger) {
	t.Helper()
	m := scrape(t, p.AdminURL)
	if used := m.Sum("meterproxy_window_used_tokens", nil); used > poisonTPM {
		t.Errorf("meterproxy_window_used_tokens %.0f after the mix, more than a minute's allowance (%d)", used, poisonTPM)
	}
	client := newClient(t, 1)
	defer client.CloseIdleConnections()
	for i := range 5 {
		a := fire(client, shot{url: p.URL + "/v1/chat/completions", body: chatBody,
			headers: map[string]string{"Authorization": "Bearer " + chatKey}}, nil)
		l.of("p", "good-interactive").record(a)
		if a.status != http.StatusOK {
			t.Errorf("interactive request %d after the poisoned bodies: %d %s", i, a.status, a.body)
		}
	}
}

// The held answers (issue 21 item 5): heldClients clients ask for answers
// of heldAnswerBytes and read all of each but the part the upstream holds
// back (fakeprovider.HeaderHoldTail: its usage), so every byte they got
// went through the proxy's meter while the answer stays in flight. The
// meter may keep only a bounded window of each: the proxy's resident
// memory may grow by heldPerAnswer per answer plus heldHeadroom, where
// keeping the answers would take 4 MiB each.
const (
	heldClients     = 45
	heldAnswerBytes = 3_900_000
	// heldPerAnswer bounds one held answer's cost: the meter's window
	// (about 65 KiB), the connection's buffers on both sides, the reverse
	// proxy's 32 KiB copy buffer and the goroutines.
	heldPerAnswer = 256 << 10
	// heldHeadroom is the garbage collector's and the runtime's share.
	heldHeadroom = 16 << 20
)

// hostileHeldAnswers holds heldClients answers in flight against p, checks
// the proxy's memory with all of them held, then lets the clients go away;
// each is recorded in l as kind "held-answer".
func hostileHeldAnswers(t *testing.T, p *procs.Proxy, l *ledger) {
	client := loadClient(t, heldClients)
	defer client.CloseIdleConnections() // before the idle check
	before := mustRead(t, p.AdminURL).rss
	var reached, done sync.WaitGroup
	reached.Add(heldClients)
	leave := make(chan struct{})
	for i := range heldClients {
		done.Go(func() {
			a := holdHeldAnswer(client, p.URL+"/v1/chat/completions", reached.Done, leave)
			if a.err != nil && !a.left {
				t.Logf("held answer %d: status %d, %s: %v", i, a.status, a.conn, a.err)
			}
			l.of("p", "held-answer").record(a)
		})
	}
	reached.Wait()
	held := mustRead(t, p.AdminURL).rss
	close(leave)
	done.Wait()
	growth, bound := held-before, float64(heldClients*heldPerAnswer+heldHeadroom)
	t.Logf("held answers: resident memory %.1f MiB before, %.1f MiB with %d answers of %.1f MB nearly all through (growth %.1f MiB, bound %.1f MiB)",
		before/(1<<20), held/(1<<20), heldClients, float64(heldAnswerBytes)/1e6, growth/(1<<20), bound/(1<<20))
	if growth > bound {
		t.Errorf("resident memory grew by %.1f MiB with %d answers held, want at most %.1f MiB", growth/(1<<20), heldClients, bound/(1<<20))
	}
}

// holdHeldAnswer asks the fake provider for a held answer, reads all the upstream sent of it,
// calls reached, and goes away when leave closes (or at once when the
// answer is not the one asked for).
func holdHeldAnswer(client *http.Client, url string, reached func(), leave <-chan struct{}) answer {
	var once sync.Once
	signal := func() { once.Do(reached) }
	defer signal()
	ctx, cancel := context.WithTimeoutCause(context.Background(), hangLimit, errHung)
	defer cancel()
	req := shot{url: url, body: chatBody, headers: map[string]string{"Authorization": "Bearer " + importKey,
		fakeprovider.HeaderReplyBytes: fmt.Sprint(heldAnswerBytes), fakeprovider.HeaderHoldTail: "true"}}.request(ctx)
	res, err := client.Do(req)
	if err != nil {
		return answer{err: err, hung: errors.Is(context.Cause(ctx), errHung)}
	}
	defer func() { _ = res.Body.Close() }()
	a := answer{status: res.StatusCode, header: res.Header}
	sent, err := strconv.ParseInt(res.Header.Get(fakeprovider.HeaderSentBytes), 10, 64)
	if res.StatusCode != http.StatusOK || err != nil || sent < heldAnswerBytes {
		a.body, a.err = io.ReadAll(res.Body)
		return a
	}
	if _, a.err = io.CopyN(io.Discard, res.Body, sent); a.err != nil {
		return a
	}
	signal()
	<-leave
	cancel() // the client goes away with the answer's tail still held
	a.err, a.left = context.Canceled, true
	return a
}
