// Command demo shows meterproxy at work in about fifteen seconds: it starts
// the fake provider and a real meterproxy process, runs steady interactive
// traffic beside a bulk flood, and prints, second by second, what reached
// the upstream and what was admitted, held and refused in each class.
//
// Run it with `make demo`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

const (
	chatKey   = "sk-demo-chat-frontend"
	importKey = "sk-demo-nightly-import"
	runFor    = 10 * time.Second
	chatRate  = 6 // interactive requests a second
	workers   = 40
)

// demoConfig is an account of 20 requests a second, partitioned 80/20 with
// a 30% interactive reserve; bulk may borrow.
const demoConfig = `server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace: 10s}
upstream: {url: "%s"}
account: {requests_per_minute: 1200, max_in_flight: 50}
classes:
  interactive: {share: 0.8, reserve: 0.3, max_wait: 2s}
  bulk: {share: 0.2, borrow: true, max_wait: 4s}
callers:
  - {name: chat-frontend, key_env: DEMO_CHAT_KEY, class: interactive}
  - {name: nightly-import, key_env: DEMO_IMPORT_KEY, class: bulk}
log: {level: info, format: json}
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		say(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	root, err := procs.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "meterproxy-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	say(out, "building meterproxy…")
	bin, err := procs.Build(ctx, root, dir, "meterproxy")
	if err != nil {
		return err
	}

	fake := fakeprovider.New(fakeprovider.Config{RPM: 1200, Latency: 50 * time.Millisecond})
	upstream, stopUpstream, err := serveUpstream(fake)
	if err != nil {
		return err
	}
	defer stopUpstream()
	cfgPath := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, demoConfig, upstream), 0o600); err != nil {
		return err
	}
	p, err := procs.StartProxy(ctx, bin, cfgPath, []string{"DEMO_CHAT_KEY=" + chatKey, "DEMO_IMPORT_KEY=" + importKey})
	if err != nil {
		return err
	}
	defer func() { _ = p.Stop(15 * time.Second) }()

	sayf(out, "\nmeterproxy on %s, fake provider on %s\n", p.URL, upstream)
	say(out, "account: 20 requests/s; interactive share 0.8 with a 0.3 reserve; bulk share 0.2, borrowing")
	sayf(out, "load: %d interactive requests/s (chat-frontend) beside a bulk flood from %d workers (nightly-import), %s\n\n",
		chatRate, workers, runFor)
	tally := newTally()
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); runLoad(ctx, p.URL, tally) }()
	if err := report(ctx, out, p.AdminURL, fake, loadDone); err != nil {
		return err
	}
	return summary(ctx, out, p.AdminURL, tally, fake)
}

// serveUpstream serves h on a free loopback port.
func serveUpstream(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// tally counts how requests ended, as the clients saw them.
type tally struct {
	ok, refused, failed [2]atomic.Int64 // index 0 interactive, 1 bulk
}

func newTally() *tally { return &tally{} }

func runLoad(ctx context.Context, proxyURL string, t *tally) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers + 2*chatRate}}
	defer client.CloseIdleConnections()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	send := func(class int, key string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.failed[class].Add(1)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			t.failed[class].Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		switch res.StatusCode {
		case http.StatusOK:
			t.ok[class].Add(1)
		case http.StatusTooManyRequests:
			t.refused[class].Add(1)
		default:
			t.failed[class].Add(1)
		}
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(runFor)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(stop) {
				send(1, importKey)
			}
		})
	}
	tick := time.NewTicker(time.Second / chatRate)
	defer tick.Stop()
	for time.Now().Before(stop) && ctx.Err() == nil {
		select {
		case <-tick.C:
			wg.Go(func() { send(0, chatKey) })
		case <-ctx.Done():
		}
	}
	wg.Wait()
}

// report prints one line a second until the load is done. A row is one
// second of the clock — one of the account's one-second windows, and the
// second the fake provider counts its arrivals in — read just before the
// second ends (at scrapeAt into it): a row read on a ticker of its own
// would straddle two windows and show up to twice the account's allowance
// admitted in "one second".
func report(ctx context.Context, out io.Writer, adminURL string, fake *fakeprovider.Provider, loadDone <-chan struct{}) error {
	const scrapeAt = 950 * time.Millisecond
	say(out, "        upstream  ---- interactive ----  ------------------- bulk -------------------")
	say(out, "second  arrivals  admitted     refused  admitted  after a hold  waiting  refused  in flight")
	var prev procs.Metrics
	first := time.Now().Unix()
	for sec := first; ; sec++ {
		wait := time.NewTimer(time.Until(time.Unix(sec, 0).Add(scrapeAt)))
		select {
		case <-wait.C:
		case <-loadDone:
			wait.Stop()
			return nil
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		m, err := procs.Scrape(ctx, adminURL)
		if err != nil {
			return err
		}
		adm := func(class, outcome string) int {
			l := map[string]string{"class": class, "outcome": outcome}
			return int(m.Sum("meterproxy_admissions_total", l) - prev.Sum("meterproxy_admissions_total", l))
		}
		sayf(out, "%6d  %8d  %8d  %10d  %8d  %12d  %7d  %7d  %9d\n", sec-first+1, fake.Arrivals()[sec],
			adm("interactive", "admitted")+adm("interactive", "held"), adm("interactive", "refused"),
			adm("bulk", "admitted")+adm("bulk", "held"), adm("bulk", "held"),
			int(m.Sum("meterproxy_queue_depth", map[string]string{"class": "bulk"})), adm("bulk", "refused"),
			int(m.Sum("meterproxy_in_flight", nil)))
		prev = m
	}
}

// summary prints the totals and checks the accounting identity.
func summary(ctx context.Context, out io.Writer, adminURL string, t *tally, fake *fakeprovider.Provider) error {
	m, err := procs.Scrape(ctx, adminURL)
	if err != nil {
		return err
	}
	say(out)
	var problems []string
	for i, class := range []string{"interactive", "bulk"} {
		ok, refused, failed := t.ok[i].Load(), t.refused[i].Load(), t.failed[i].Load()
		fwd := int64(m.Sum("meterproxy_requests_total", map[string]string{"class": class, "outcome": "forwarded"}))
		ref := int64(m.Sum("meterproxy_requests_total", map[string]string{"class": class, "outcome": "refused"}))
		sayf(out, "%-11s sent %4d: %4d forwarded, %4d refused with 429 (the proxy counted %d forwarded, %d refused)\n",
			class, ok+refused+failed, ok, refused, fwd, ref)
		if fwd != ok || ref != refused || failed != 0 {
			problems = append(problems, class+" counts disagree")
		}
	}
	st := fake.Stats()
	sayf(out, "upstream    served %d, refused %d with its own 429\n", st.Served, st.RateLimited)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	say(out, "\nevery request ended as exactly one of forwarded or refused, and the counts add up.")
	return nil
}

// say and sayf print to the terminal; a failed write there has nowhere to
// be reported.
func say(w io.Writer, args ...any) { _, _ = fmt.Fprintln(w, args...) }

func sayf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
