package proxy

import (
	"context"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

const traceChat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}]}`

// tracedProxy is a proxy tracing to a real OTLP receiver, in front of
// the fake provider, as OpenAI (its own key), with one slot in flight
// when oneSlot.
func tracedProxy(t *testing.T, fake *fakeprovider.Provider, maxWait time.Duration) (*testProxy, *otlpReceiver) {
	t.Helper()
	rc := newOTLPReceiver(t)
	p := newTestProxy(t, proxyOpts{upstream: fake, tracer: rc.tracerProvider(t),
		mutate: func(c *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
			c.Upstream.Provider = "openai"
			c.Upstream.APIKey = "sk-test"
			q.Account.MaxInFlight = 1
			q.Classes.Bulk.MaxWait = maxWait
		}})
	return p, rc
}

// waitSum is the sum of meterproxy_queue_wait_seconds for bulk and
// outcome.
func waitSum(t *testing.T, reg *prometheus.Registry, outcome string) time.Duration {
	t.Helper()
	s := findSeries(t, reg, "meterproxy_queue_wait_seconds", map[string]string{"class": "bulk", "outcome": outcome})
	return time.Duration(s.GetHistogram().GetSampleSum() * float64(time.Second))
}

// nearWait fails unless the admission span's duration is within 10 ms of
// the wait the metric observed.
func nearWait(t *testing.T, span *tracepb.Span, metric time.Duration) {
	t.Helper()
	if d := spanDuration(span) - metric; d < -10*time.Millisecond || d > 10*time.Millisecond {
		t.Errorf("admission span %s, the metric's wait %s: more than 10ms apart", spanDuration(span), metric)
	}
}

// TestTraceForwarded: a forwarded request's trace, received by a real
// OTLP receiver, continues the caller's traceparent, passes its own
// upstream, and carries the GenAI attributes of the request and its
// usage; its admission span is the wait the metric observed.
func TestTraceForwarded(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{})
	p, rc := tracedProxy(t, fake, time.Minute)
	const caller = "0af7651916cd43dd8448eb211c80319c"
	const callerSpan = "b7ad6b7169203331"
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", traceChat)
	req.Header.Set("traceparent", "00-"+caller+"-"+callerSpan+"-01")
	status, _, body := do(t, req)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	spans := rc.trace(t, "chat gpt-4o", "admission", "upstream")
	root, adm, up := spans["chat gpt-4o"], spans["admission"], spans["upstream"]
	if traceID(root) != caller || hex.EncodeToString(root.GetParentSpanId()) != callerSpan {
		t.Errorf("root span in trace %s under %x, want the caller's %s under %s", traceID(root), root.GetParentSpanId(), caller, callerSpan)
	}
	if root.GetKind() != tracepb.Span_SPAN_KIND_SERVER || up.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("kinds: root %v, upstream %v; want server, client", root.GetKind(), up.GetKind())
	}
	u := gjson.GetBytes(body, "usage")
	want := map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
		"gen_ai.usage.input_tokens":            u.Get("prompt_tokens").String(),
		"gen_ai.usage.output_tokens":           u.Get("completion_tokens").String(),
		"gen_ai.usage.cache_read.input_tokens": strconv.FormatInt(u.Get("prompt_tokens_details.cached_tokens").Int(), 10),
		"gen_ai.usage.reasoning.output_tokens": u.Get("completion_tokens_details.reasoning_tokens").Raw,
		"gen_ai.response.model":                gjson.GetBytes(body, "model").Str,
		"http.response.status_code":            "200", "meterproxy.outcome": outcomeForwarded, "meterproxy.class": "bulk",
		"meterproxy.caller": classify.UnknownCaller, "meterproxy.pool": "default",
	}
	got := attrs(root)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("root %s = %q, want %q", k, got[k], v)
		}
	}
	if got := attrs(adm); got["meterproxy.outcome"] != admissionAdmitted || got["meterproxy.held_by"] != "" {
		t.Errorf("admission span %v, want admitted, held by nothing", got)
	}
	if got := attrs(up); got["http.response.status_code"] != "200" || got["meterproxy.spill"] != "0" || got["meterproxy.flex.retry"] != "0" {
		t.Errorf("upstream span %v", got)
	}
	nearWait(t, adm, waitSum(t, p.reg, waitAdmitted))
	for _, s := range []*tracepb.Span{root, adm, up} {
		for k, v := range attrs(s) {
			if strings.Contains(v, "sk-test") || strings.Contains(v, "hello there") {
				t.Errorf("span %s attribute %s holds a key or the body: %q", s.GetName(), k, v)
			}
		}
	}
	// The upstream got the attempt's span context, in the caller's trace.
	tp := fake.Requests()[0].Header.Get("traceparent")
	if wantTP := "00-" + caller + "-" + hex.EncodeToString(up.GetSpanId()) + "-01"; tp != wantTP {
		t.Errorf("upstream traceparent %q, want %q", tp, wantTP)
	}
	if got["gen_ai.response.model"] == "" || got["gen_ai.usage.reasoning.output_tokens"] == "" {
		t.Errorf("root has no gen_ai.response.model or reasoning tokens: %v", got)
	}

	// A reasoning model's answer: the reasoning part of its output, and
	// the model the provider named.
	status, _, body = do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"o3-mini","messages":[{"role":"user","content":"hello there"}]}`))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	o3 := attrs(rc.trace(t, "chat o3-mini")["chat o3-mini"])
	reasoning := gjson.GetBytes(body, "usage.completion_tokens_details.reasoning_tokens").Raw
	if o3["gen_ai.response.model"] != gjson.GetBytes(body, "model").Str || o3["gen_ai.usage.reasoning.output_tokens"] != reasoning || reasoning == "0" {
		t.Errorf("o3-mini's span: model %q, reasoning %q; the provider answered %s", o3["gen_ai.response.model"], o3["gen_ai.usage.reasoning.output_tokens"], body)
	}
}

// TestTraceRefusedUnknownCaller: a request refused at the front door is
// a trace of its own: its outcome, reason and status, no admission.
func TestTraceRefusedUnknownCaller(t *testing.T) {
	rc := newOTLPReceiver(t)
	p := newTestProxy(t, proxyOpts{upstream: fakeprovider.New(fakeprovider.Config{}), tracer: rc.tracerProvider(t),
		environ: map[string]string{"K": "sk-known"},
		mutate: func(_ *Config, _ *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			cc.UnknownCallers = classify.UnknownReject
			*callers = []classify.Caller{{Name: "known", KeyEnv: "K"}}
		}})
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", traceChat)
	req.Header.Set("Authorization", "Bearer sk-stranger")
	if status, _, body := do(t, req); status != http.StatusUnauthorized {
		t.Fatalf("status %d: %s", status, body)
	}
	root := rc.trace(t, http.MethodPost)[http.MethodPost]
	got := attrs(root)
	if got["meterproxy.outcome"] != outcomeRefused || got["meterproxy.reason"] != reasonUnknownCaller || got["http.response.status_code"] != "401" {
		t.Errorf("root span %v, want refused unknown_caller 401", got)
	}
	for _, s := range rc.received() {
		if s.GetName() == "admission" {
			t.Error("a request refused before admission has an admission span")
		}
	}
}

// TestTraceHeldThenAdmitted: a request held by the in-flight bound
// behind another has an admission span that says so, as long as the wait
// the metric observed.
func TestTraceHeldThenAdmitted(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Latency: 300 * time.Millisecond})
	p, rc := tracedProxy(t, fake, time.Minute)
	first := occupy(t, p, fake)
	status, _, body := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", traceChat))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if s := <-first; s != http.StatusOK {
		t.Fatalf("the first request: %d", s)
	}
	firstAdm := rc.trace(t, "chat gpt-4o-first", "admission")["admission"]
	adm := rc.trace(t, "chat gpt-4o", "admission")["admission"]
	if got := attrs(adm); got["meterproxy.outcome"] != admissionHeld || got["meterproxy.held_by"] != gate.HeldByInFlight {
		t.Errorf("admission span %v, want held by in_flight", got)
	}
	nearWait(t, adm, waitSum(t, p.reg, waitAdmitted)-spanDuration(firstAdm))
}

// TestTraceRefusedAtMaxWait: a request refused when max_wait passed says
// what held it.
func TestTraceRefusedAtMaxWait(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Latency: 2 * time.Second})
	p, rc := tracedProxy(t, fake, 100*time.Millisecond)
	first := occupy(t, p, fake)
	if status, _, body := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", traceChat)); status != http.StatusTooManyRequests {
		t.Fatalf("status %d: %s", status, body)
	}
	spans := rc.trace(t, "chat gpt-4o", "admission")
	if got := attrs(spans["admission"]); got["meterproxy.outcome"] != admissionRefused || got["meterproxy.reason"] != reasonMaxWait ||
		got["meterproxy.held_by"] != gate.HeldByInFlight {
		t.Errorf("admission span %v, want refused max_wait_exceeded, held by in_flight", got)
	}
	if got := attrs(spans["chat gpt-4o"]); got["meterproxy.outcome"] != outcomeRefused || got["http.response.status_code"] != "429" {
		t.Errorf("root span %v, want refused 429", got)
	}
	nearWait(t, spans["admission"], waitSum(t, p.reg, waitRefused))
	<-first
}

// TestTraceCancelled: a client that leaves while its request waits ends
// its trace cancelled.
func TestTraceCancelled(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Latency: 300 * time.Millisecond})
	p, rc := tracedProxy(t, fake, time.Minute)
	first := occupy(t, p, fake)
	ctx, cancel := context.WithCancel(t.Context())
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", traceChat).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = res.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the second request to wait", func() bool {
		return p.admitter.State().Queued["bulk"] == 1
	})
	cancel()
	if err := <-errc; err == nil {
		t.Error("the cancelled request was answered")
	}
	spans := rc.trace(t, "chat gpt-4o", "admission")
	if got := attrs(spans["admission"]); got["meterproxy.outcome"] != admissionCancelled {
		t.Errorf("admission span %v, want cancelled", got)
	}
	if got := attrs(spans["chat gpt-4o"]); got["meterproxy.outcome"] != outcomeCancelled {
		t.Errorf("root span %v, want cancelled", got)
	}
	<-first
}

// occupy sends a first request, which fills the proxy's one in-flight
// slot until the fake answers it, and returns once it is upstream: its
// status comes on the channel.
func occupy(t *testing.T, p *testProxy, fake *fakeprovider.Provider) <-chan int {
	t.Helper()
	first := make(chan int, 1)
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o-first","messages":[]}`)
	go func() {
		status, _, _ := do(t, req)
		first <- status
	}()
	waitFor(t, "the first request upstream", func() bool { return len(fake.Requests()) == 1 })
	return first
}
