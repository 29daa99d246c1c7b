package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestSweepRateLimitBinds (issue 37 item 2): against a provider whose
// server would take any concurrency at 200 ms but whose headers say 6,000
// requests a minute — the 2 s and 600/min, scaled ten times, so
// the bound where the rate meets the limit is 20 in flight again — the
// 1 s steps never drain its burst, so no 429 comes; the sweep reads the
// limit from the headers, stops at the first step past it, and recommends
// the concurrency whose rate is the limit's (within 10%), saying the rate
// binds, not the server, and what to configure; and that its steps were
// too short to see the 429, with the --duration that would.
func TestSweepRateLimitBinds(t *testing.T) {
	const rpm, latency = 6000, 200 * time.Millisecond
	for _, c := range []struct{ name, path, header string }{
		{"OpenAI", "/v1/chat/completions", "x-ratelimit-limit-requests"},
		{"Anthropic", "/v1/messages", "anthropic-ratelimit-requests-limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := fakeprovider.New(fakeprovider.Config{RPM: rpm, Latency: latency, NoLog: true})
			srv := httptest.NewServer(p)
			defer srv.Close()
			out, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL, "--model", "fake-model", "--path", c.path,
				"--max", "64", "--duration", "1s")
			if err != nil {
				t.Fatalf("sweep: %v\n%s", err, progress)
			}
			t.Logf("\n%s", out)
			m := regexp.MustCompile(`recommended bound: (\d+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no bound recommended:\n%s", out)
			}
			bound, _ := strconv.Atoi(m[1])
			if rate := float64(bound) / latency.Minutes(); math.Abs(rate-rpm) > 0.1*rpm {
				t.Errorf("recommended bound %d: %.0f completions a minute at %s; want within 10%% of the %d the headers allow:\n%s",
					bound, rate, latency, rpm, out)
			}
			if got := tableRows(out); len(got) == 0 || got[len(got)-1] != 27 {
				t.Errorf("table rows %v; want the ramp stopped at 27, the first level past the limit:\n%s", got, out)
			}
			for _, want := range []string{
				"rate limit: 6000 requests/min from " + c.header,
				"recommended bound: " + m[1] + ", where the rate meets the limit: the provider's rate limit (6000 requests/min from " + c.header + ") binds, not the server's capacity",
				"config: account.max_in_flight: " + m[1] + ", account.requests_per_minute: 6000",
				"past the rate limit: stopped here",
				"stopped: concurrency 27 sent ",
				"steps of 1s are shorter than the provider's burst takes to drain", "rerun with --start 27 --max 27 --duration ",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if st := p.Stats(); st.RateLimited != 0 {
				t.Errorf("%d requests answered 429; the burst should not have drained", st.RateLimited)
			}
		})
	}
}

// withoutLimitHeaders serves h with the rate-limit headers taken off its
// answers: a provider that rate-limits without saying so.
func withoutLimitHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&strippingWriter{ResponseWriter: w}, r)
	})
}

// strippingWriter drops the rate-limit headers as the answer begins.
type strippingWriter struct {
	http.ResponseWriter
	began bool
}

func (w *strippingWriter) strip() {
	if w.began {
		return
	}
	w.began = true
	for k := range w.Header() {
		if strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			w.Header().Del(k)
		}
	}
}

func (w *strippingWriter) WriteHeader(code int) {
	w.strip()
	w.ResponseWriter.WriteHeader(code)
}

func (w *strippingWriter) Write(b []byte) (int, error) {
	w.strip()
	return w.ResponseWriter.Write(b)
}

// TestBindingLimit: of the limits reported, the one allowing the fewest
// requests a minute binds, token limits turned into requests by the
// answers' mean usage; a token limit without usage, or nothing, binds
// nothing.
func TestBindingLimit(t *testing.T) {
	limits := func(req, tok, in, out int64) providerLimits {
		l := noLimits()
		l.observe(ratelimit.Observation{Requests: ratelimit.Bucket{Limit: req, Remaining: -1},
			Tokens: ratelimit.Bucket{Limit: tok, Remaining: -1}, InputTokens: ratelimit.Bucket{Limit: in, Remaining: -1},
			OutputTokens: ratelimit.Bucket{Limit: out, Remaining: -1}})
		return l
	}
	for _, tt := range []struct {
		name       string
		l          providerLimits
		api        usage.API
		in, out    float64
		wantOK     bool
		wantDim    limitDim
		wantPerMin float64
		wantHeader string
	}{
		{"requests alone", limits(600, -1, -1, -1), usage.ChatCompletions, 10, 90, true, dimRequests, 600, "x-ratelimit-limit-requests"},
		{"tokens bind first", limits(600, 40000, -1, -1), usage.ChatCompletions, 10, 90, true, dimTokens, 400, "x-ratelimit-limit-tokens"},
		{"requests bind first", limits(300, 40000, -1, -1), usage.ChatCompletions, 10, 90, true, dimRequests, 300, "x-ratelimit-limit-requests"},
		{"anthropic output tokens", limits(50, -1, 30000, 8000), usage.Messages, 20, 200, true, dimOutput, 40, "anthropic-ratelimit-output-tokens-limit"},
		{"anthropic requests", limits(50, -1, 30000, 80000), usage.Messages, 20, 200, true, dimRequests, 50, "anthropic-ratelimit-requests-limit"},
		{"token limit, no usage", limits(-1, 40000, -1, -1), usage.ChatCompletions, 0, 0, false, 0, 0, ""},
		{"nothing reported", noLimits(), usage.ChatCompletions, 10, 90, false, 0, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim, ok := tt.l.binding(tt.api, tt.in, tt.out)
			if ok != tt.wantOK || (ok && (lim.dim != tt.wantDim || math.Abs(lim.perMin-tt.wantPerMin) > 1e-9 || lim.header != tt.wantHeader)) {
				t.Errorf("binding = %+v, %v; want %v of dimension %d, %v requests/min from %s", lim, ok, tt.wantOK, tt.wantDim, tt.wantPerMin, tt.wantHeader)
			}
		})
	}
}

// TestProviderLimits: the smallest limit and, while one is known, the
// largest remaining count are kept; the zero Observation (no headers
// read) and unknown counts change nothing.
func TestProviderLimits(t *testing.T) {
	l := noLimits()
	l.observe(ratelimit.Observation{})
	l.observe(ratelimit.Unknown())
	if l != noLimits() {
		t.Fatalf("nothing reported, yet %+v", l)
	}
	for _, b := range []ratelimit.Bucket{{Limit: 600, Remaining: 590}, {Limit: 500, Remaining: 10}, {Limit: -1, Remaining: 999}} {
		o := ratelimit.Unknown()
		o.Requests = b
		l.observe(o)
	}
	if l[dimRequests] != (seenLimit{limit: 500, remaining: 590}) {
		t.Errorf("requests %+v, want limit 500 (the smallest), remaining 590 (the largest with a limit)", l[dimRequests])
	}
	m := noLimits()
	m.merge(l)
	if m != l {
		t.Errorf("merge into nothing gave %+v, want %+v", m, l)
	}
	if got, want := l.configLines(20), []string{"account.max_in_flight: 20", "account.requests_per_minute: 500"}; !slices.Equal(got, want) {
		t.Errorf("configLines %v, want %v", got, want)
	}
	l[dimTokens].limit, l[dimInput].limit, l[dimOutput].limit = 90000, 30000, 8000
	if got, want := l.configLines(3), []string{"account.max_in_flight: 3", "account.requests_per_minute: 500",
		"account.tokens_per_minute: 30000", "account.output_tokens_per_minute: 8000"}; !slices.Equal(got, want) {
		t.Errorf("configLines %v, want %v (Anthropic's input budget as tokens_per_minute)", got, want)
	}
}

// TestLimitBound: the bound is the limit times the mean latency of the
// last complete step within the limit (Little's law), rounded down; the
// first step's latency when even it passed the limit; 0 when one in
// flight would pass it.
func TestLimitBound(t *testing.T) {
	st := func(c int, perMin float64, mean time.Duration) step {
		return step{concurrency: c, completionsPerMin: perMin, mean: mean}
	}
	steps := []step{st(8, 2400, 200*time.Millisecond), st(12, 3500, 205*time.Millisecond), st(18, 5000, 216*time.Millisecond), st(27, 7500, 216*time.Millisecond)}
	if c, w := limitBound(steps, 6000); c != 21 || w != 216*time.Millisecond {
		t.Errorf("limitBound = %d at %s; want 21 (6000 × 216ms, rounded down)", c, w)
	}
	if c, w := limitBound(steps, 600); c != 2 || w != 200*time.Millisecond {
		t.Errorf("limitBound = %d at %s; want 2 at the first step's 200ms", c, w)
	}
	if c, _ := limitBound(steps[:1], 60); c != 0 {
		t.Errorf("limitBound = %d; want 0: one in flight at 200ms sends 300 a minute, past 60", c)
	}
	cut := []step{st(8, 2400, 200*time.Millisecond)}
	cut[0].rateLimited = true
	if c, w := limitBound(cut, 6000); c != 0 || w != 0 {
		t.Errorf("limitBound over no complete step = %d at %s; want 0", c, w)
	}
}

// TestLimitDrain: a step past the limit drains the bucket it found at the
// rate by which it passes it; within the limit, or with no remaining
// count, there is no drain to tell.
func TestLimitDrain(t *testing.T) {
	lim := rateLimit{dim: dimRequests, limit: 600, perRequest: 1, perMin: 600}
	s := step{completionsPerMin: 800, limits: noLimits()}
	if _, ok := lim.drain(s); ok {
		t.Error("a drain told with no remaining count")
	}
	s.limits[dimRequests] = seenLimit{limit: 600, remaining: 500}
	if d, ok := lim.drain(s); !ok || d != 150*time.Second {
		t.Errorf("drain = %s, %v; want 2m30s (500 left at 200 a minute past the limit)", d, ok)
	}
	s.completionsPerMin = 550
	if _, ok := lim.drain(s); ok {
		t.Error("a step within the limit drained")
	}
	tok := rateLimit{dim: dimTokens, limit: 40000, perRequest: 100, perMin: 400}
	s.completionsPerMin, s.limits[dimTokens] = 500, seenLimit{limit: 40000, remaining: 30000}
	if d, ok := tok.drain(s); !ok || d != 3*time.Minute {
		t.Errorf("token drain = %s, %v; want 3m (300 requests' tokens at 100 a minute past)", d, ok)
	}
}
