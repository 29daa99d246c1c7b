package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// sweepKey is the key the sweep tests send; it must never be printed.
const sweepKey = "sk-sweep-secret-0123456789"

// runSweepCmd runs `meterproxy sweep` with SWEEP_KEY in the environment
// and returns stdout, stderr and the error.
func runSweepCmd(ctx context.Context, t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(ctx, append([]string{"sweep", "--api-key-env", "SWEEP_KEY"}, args...), []string{"SWEEP_KEY=" + sweepKey}, &out, &errOut)
	if strings.Contains(out.String()+errOut.String(), sweepKey) {
		t.Errorf("the key was printed:\n%s\n%s", out.String(), errOut.String())
	}
	return out.String(), errOut.String(), err
}

// tableRows returns the concurrency column of the printed table.
func tableRows(out string) []int {
	var rows []int
	for _, m := range regexp.MustCompile(`(?m)^(\d+) +\d+ `).FindAllStringSubmatch(out, -1) {
		c, _ := strconv.Atoi(m[1])
		rows = append(rows, c)
	}
	return rows
}

// TestSweepFindsTheKnee: against a server with 8 slots at 200 ms, the
// sweep over 2…32 finds the knee within ±25% of 8, prints the table with
// the knee marked and what it spent, sends the key without printing it,
// and writes an SVG with both series and the knee.
func TestSweepFindsTheKnee(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{Slots: 8, Latency: 200 * time.Millisecond, NoLog: true})
	srv := httptest.NewServer(p)
	defer srv.Close()
	svgPath := filepath.Join(t.TempDir(), "sweep.svg")
	out, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL, "--model", "fake-model",
		"--start", "2", "--step", "2", "--max", "32", "--duration", "1.5s", "--svg", svgPath)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, progress)
	}
	t.Logf("\n%s", out)
	if got := tableRows(out); !slices.Equal(got, []int{2, 4, 8, 16, 32}) {
		t.Errorf("table rows %v, want 2 4 8 16 32:\n%s", got, out)
	}
	m := regexp.MustCompile(`knee: concurrency (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no knee stated:\n%s", out)
	}
	if k, _ := strconv.Atoi(m[1]); k < 6 || k > 10 {
		t.Errorf("knee %d, want 8 ± 25%%:\n%s", k, out)
	}
	for _, want := range []string{
		"concurrency  completions/min  output tokens/s  p50", "<- knee = recommended bound",
		"recommended bound: " + m[1] + ", the knee", "95% of the best seen", "stopped: --max 32 reached", "spent: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(progress, "sweep: concurrency 32:") {
		t.Errorf("no progress line for the last step on stderr: %q", progress)
	}
	if st := p.Stats(); st.Served == 0 || !strings.Contains(out, "spent: "+strconv.Itoa(st.Requests)+" requests") {
		t.Errorf("provider served %d of %d requests; the sweep says\n%s", st.Served, st.Requests, out)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(svg, []byte(sweepKey)) {
		t.Error("the key is in the SVG")
	}
	checkSVG(t, svg, 5, true)
}

// checkSVG parses svg as XML and checks its series have points each, and
// the knee line when wantKnee.
func checkSVG(t *testing.T, svg []byte, points int, wantKnee bool) {
	t.Helper()
	series := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not XML: %v\n%s", err, svg)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case el.Name.Local == "polyline":
			series[attr["id"]] = len(strings.Fields(attr["points"]))
		case el.Name.Local == "line" && attr["id"] == "knee":
			series["knee"] = 1
		}
	}
	want := map[string]int{}
	if points > 0 {
		want = map[string]int{"completions": points, "latency": points}
	}
	if wantKnee {
		want["knee"] = 1
	}
	if len(series) != len(want) {
		t.Errorf("SVG elements %v, want %v", series, want)
	}
	for k, n := range want {
		if series[k] != n {
			t.Errorf("SVG %s: %d points, want %d (all: %v)", k, series[k], n, series)
		}
	}
}

// TestSweepStopsAtThe429: against a provider allowing 60 requests a
// minute (a full bucket of 60 at the start) that sends no rate-limit
// headers, concurrency 2 at 50 ms sends about 40 in its second and
// passes; 4 meets a 429, and the sweep stops there, saying the rate limit
// binds, with the last clean level as the bound. (With the headers the
// sweep stops at 2, past the limit they report: TestSweepRateLimitBinds.)
func TestSweepStopsAtThe429(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{RPM: 60, Latency: 50 * time.Millisecond, NoLog: true})
	srv := httptest.NewServer(withoutLimitHeaders(p))
	defer srv.Close()
	out, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL, "--model", "fake-model",
		"--start", "2", "--step", "2", "--max", "64", "--duration", "1s")
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, progress)
	}
	if got := tableRows(out); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("table rows %v, want 2 4:\n%s", got, out)
	}
	for _, want := range []string{
		"429: stopped here", "stopped: the upstream answered 429 at concurrency 4 (its rate limit binds)",
		"recommended bound: 2, the last concurrency before the 429", "429×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if st := p.Stats(); st.RateLimited == 0 || st.RateLimited > 4 {
		t.Errorf("%d requests answered 429; want the sweep stopped at the first (one per worker at most)", st.RateLimited)
	}
}

// TestSweepMaxBoundsTheRamp: --max ends the ramp at the last level not
// above it, and a throughput still growing there is said to leave the
// knee possibly higher.
func TestSweepMaxBoundsTheRamp(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{Latency: 20 * time.Millisecond, NoLog: true})
	srv := httptest.NewServer(p)
	defer srv.Close()
	out, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL, "--model", "fake-model",
		"--start", "1", "--step", "+2", "--max", "6", "--duration", "300ms")
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, progress)
	}
	if got := tableRows(out); !slices.Equal(got, []int{1, 3, 5}) {
		t.Errorf("table rows %v, want 1 3 5:\n%s", got, out)
	}
	for _, want := range []string{"stopped: concurrency 5 was the last step: the next would pass --max 6", "throughput still grew at the last complete step: the knee may lie higher (raise --max)", "recommended bound: 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSweepStopsWhenAStepFails: an upstream that refuses every connection
// stops the sweep at its first step's first request, says why, and still
// writes a valid SVG.
func TestSweepStopsWhenAStepFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	svgPath := filepath.Join(t.TempDir(), "sweep.svg")
	out, progress, err := runSweepCmd(t.Context(), t, "--url", "http://"+addr, "--model", "m", "--duration", "100ms", "--svg", svgPath)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, progress)
	}
	for _, want := range []string{"stopped: every request at concurrency 1 failed (connection×1)", "refused", "knee: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg, 0, false)
}

// TestSweepInterrupted: an interrupt (the context's end) mid-step prints
// what was measured, marks the step, and fails the command.
func TestSweepInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond, NoLog: true})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 20 { // during the second step: the first sends about 10 in 100ms
			cancel()
		}
		p.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out, _, err := runSweepCmd(ctx, t, "--url", srv.URL, "--model", "m", "--duration", "100ms", "--step", "+1", "--max", "2")
	if !errors.Is(err, errSweepInterrupted) {
		t.Errorf("sweep: %v, want errSweepInterrupted", err)
	}
	for _, want := range []string{"interrupted", "stopped: interrupted at concurrency", "spent: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSweepSendsTheKey: the key goes in the header the path's API reads
// it from, and the body names the model and max_tokens.
func TestSweepSendsTheKey(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
	srv := httptest.NewServer(p)
	defer srv.Close()
	if _, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL, "--model", "claude-x", "--path", "/v1/messages",
		"--max-tokens", "77", "--duration", "20ms", "--max", "1"); err != nil {
		t.Fatalf("sweep: %v\n%s", err, progress)
	}
	reqs := p.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the provider")
	}
	r := reqs[0]
	if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != sweepKey || r.Header.Get("Anthropic-Version") == "" {
		t.Errorf("request %s with headers %v; want /v1/messages with X-Api-Key and anthropic-version", r.Path, r.Header)
	}
	if !bytes.Contains(r.Body, []byte(`"model":"claude-x"`)) || !bytes.Contains(r.Body, []byte(`"max_tokens":77`)) {
		t.Errorf("body %s; want the model and max_tokens", r.Body)
	}
}

// TestSweepRedirects: a redirect to another host (scheme, host or port)
// is refused, whatever header carries the key — Go's client drops
// Authorization on its own but would send Api-Key and X-Api-Key on — so
// the other host sees no request, and the sweep stops saying why; a
// redirect within the same host is followed, the key with it.
func TestSweepRedirects(t *testing.T) {
	for _, c := range []struct {
		name, path, keyHeader string
	}{
		{"OpenAI", "/v1/chat/completions", "Authorization"},
		{"Azure", "/openai/deployments/d/chat/completions?api-version=2024-10-21", "Api-Key"},
		{"Anthropic", "/v1/messages", "X-Api-Key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var elsewhere atomic.Int64
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				elsewhere.Add(1)
				w.WriteHeader(http.StatusOK)
			}))
			defer other.Close()
			p := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case strings.HasPrefix(r.URL.Path, "/away"):
					http.Redirect(w, r, other.URL+strings.TrimPrefix(r.URL.Path, "/away"), http.StatusTemporaryRedirect) //nolint:gosec // G710: the redirect away under test
				case strings.HasPrefix(r.URL.Path, "/moved"):
					http.Redirect(w, r, strings.TrimPrefix(r.URL.RequestURI(), "/moved"), http.StatusPermanentRedirect) //nolint:gosec // G710: the same-host redirect under test
				default:
					p.ServeHTTP(w, r)
				}
			}))
			defer srv.Close()
			out, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL+"/away", "--model", "m", "--path", c.path,
				"--duration", "20ms", "--max", "1")
			if err != nil {
				t.Fatalf("sweep: %v\n%s", err, progress)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("the other host got %d requests, want none: the sweep followed a redirect away with the key", n)
			}
			if want := "refused a redirect to another host"; !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if _, progress, err := runSweepCmd(t.Context(), t, "--url", srv.URL+"/moved", "--model", "m", "--path", c.path,
				"--duration", "20ms", "--max", "1"); err != nil {
				t.Fatalf("sweep through a same-host redirect: %v\n%s", err, progress)
			}
			reqs := p.Requests()
			if len(reqs) == 0 {
				t.Fatal("a redirect within the host was not followed")
			}
			if got := reqs[0].Header.Get(c.keyHeader); !strings.Contains(got, sweepKey) {
				t.Errorf("the same-host redirect arrived with %s %q, want the key", c.keyHeader, got)
			}
		})
	}
}
