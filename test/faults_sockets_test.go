//go:build faults

package test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// Issue 33: Responses WebSockets cut at every point of a turn — by the
// client, by the upstream (the fake's four cut points), and with Redis
// down at the handshake and mid-session. Each case ends with nothing in
// flight (the gauges 0, the goroutines back to idle, Redis's in-flight
// totals 0), every turn counted once as forwarded, refused or cancelled,
// and its charge settled once: an estimate (at most the worst case) for a
// turn cut before its terminal event, the provider's usage after it.

// socketTurnsWant is what a case's turns must have counted, as deltas.
type socketTurnsWant struct {
	forwarded, cancelled float64
	cutClient, cutUp     float64
	// exact says the forwarded turns were settled from the provider's
	// usage (none estimated); else each was cut before its terminal event
	// and settled as an estimate.
	exact bool
}

// socketLedger is what the proxy counted of the agent's turns.
type socketLedger struct {
	forwarded, cancelled, refused, all float64
	cutClient, cutUp                   float64
	exact, estimated                   tokenCount
	spendExact, spendEstimated         float64
}

func readSocketLedger(m procs.Metrics) socketLedger {
	agent := func(extra ...string) map[string]string {
		l := map[string]string{"caller": "agent"}
		for i := 0; i < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	tok := func(kind, est string) int64 {
		return int64(sum(m, "meterproxy_tokens_total", agent("kind", kind, "estimated", est)))
	}
	return socketLedger{
		forwarded:      sum(m, "meterproxy_requests_total", agent("outcome", "forwarded", "code", "200")),
		cancelled:      sum(m, "meterproxy_requests_total", agent("outcome", "cancelled")),
		refused:        sum(m, "meterproxy_requests_total", agent("outcome", "refused")),
		all:            sum(m, "meterproxy_requests_total", agent()),
		cutClient:      sum(m, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}),
		cutUp:          sum(m, "meterproxy_responses_cut_short_total", map[string]string{"side": "upstream"}),
		exact:          tokenCount{tok("input", "false"), tok("output", "false")},
		estimated:      tokenCount{tok("input", "true"), tok("output", "true")},
		spendExact:     sum(m, "meterproxy_spend_usd_total", agent("estimated", "false")),
		spendEstimated: sum(m, "meterproxy_spend_usd_total", agent("estimated", "true")),
	}
}

// socketFaultMaxOutput is every fault turn's max_output_tokens: the worst
// case of its output.
const socketFaultMaxOutput = 40

// faultTurn is a response.create whose metadata asks the fake for knobs.
func faultTurn(n int, knobs map[string]string) string {
	extra := ""
	if len(knobs) > 0 {
		b, _ := json.Marshal(knobs)
		extra = `,"metadata":` + string(b)
	}
	return createTurn(n, extra)
}

// checkSocketCase checks what a case added to the proxy's counters from
// before, once p is quiet (no socket open, nothing in flight), against
// want and the turns the fake served since fakeFrom.
func checkSocketCase(t *testing.T, p *procs.Proxy, fp *fakeprovider.Provider, before socketLedger, fakeFrom int, want socketTurnsWant) {
	t.Helper()
	now := readSocketLedger(socketsQuiet(t, p))
	d := func(a, b float64) float64 { return a - b }
	got := socketTurnsWant{forwarded: d(now.forwarded, before.forwarded), cancelled: d(now.cancelled, before.cancelled),
		cutClient: d(now.cutClient, before.cutClient), cutUp: d(now.cutUp, before.cutUp), exact: want.exact}
	if got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	if n := now.all - before.all; n != want.forwarded+want.cancelled || now.refused != before.refused {
		t.Errorf("%v requests counted (%v refused), want %v: a turn counted twice or lost", n, now.refused-before.refused, want.forwarded+want.cancelled)
	}
	var billed tokenCount
	served := 0
	for _, r := range fp.Requests()[fakeFrom:] {
		if r.Socket == fakeprovider.SocketResponses && r.Usage != nil {
			billed.in, billed.out = billed.in+int64(r.Usage.InputTokens), billed.out+int64(r.Usage.OutputTokens)
			served++
		}
	}
	minus := func(a, b tokenCount) tokenCount { return tokenCount{a.in - b.in, a.out - b.out} }
	exact, est := minus(now.exact, before.exact), minus(now.estimated, before.estimated)
	spendExact, spendEst := now.spendExact-before.spendExact, now.spendEstimated-before.spendEstimated
	switch {
	case want.forwarded == 0:
		if exact != (tokenCount{}) || est != (tokenCount{}) || spendExact != 0 || spendEst != 0 {
			t.Errorf("no turn was forwarded, yet %v exact and %v estimated tokens, $%v + $%v spent", exact, est, spendExact, spendEst)
		}
	case want.exact:
		if exact != billed || est != (tokenCount{}) || spendEst != 0 || spendExact <= 0 {
			t.Errorf("metered %v exact, %v estimated ($%v, $%v estimated); want the fake's %v, none estimated", exact, est, spendExact, spendEst, billed)
		}
	default:
		// Cut before the terminal event: settled once, its tokens an
		// estimate of what was sent (output within the cap), its spend the
		// worst case (the estimated input, the whole output cap) — no more:
		// twice would pass it.
		perTurn := int64(want.forwarded)
		worst := (float64(est.in)*budgetPriceIn + float64(perTurn*socketFaultMaxOutput)*budgetPriceOut) / 1e6
		if exact != (tokenCount{}) || spendExact != 0 || est.in <= 0 || est.out > perTurn*socketFaultMaxOutput || spendEst <= 0 || spendEst > worst*(1+1e-9) {
			t.Errorf("metered %v exact, %v estimated ($%v, $%v estimated); want one estimate per turn (output ≤ %d, spend ≤ the worst case $%v), none exact",
				exact, est, spendExact, spendEst, socketFaultMaxOutput, worst)
		}
	}
	t.Logf("counted %+v; tokens %v exact, %v estimated; $%.6f + $%.6f estimated; the fake served %d turn(s), usage %v",
		got, exact, est, spendExact, spendEst, served, billed)
}

// readUntil reads events off c until one of type typ has been read n
// times, and returns how many events it read.
func readUntil(t *testing.T, c *websocket.Conn, typ string, n int) int {
	t.Helper()
	read := 0
	for seen := 0; seen < n; read++ {
		_, data, err := c.Read(t.Context())
		if err != nil {
			t.Fatalf("read: %v after %d events, waiting for %s #%d", err, read, typ, seen+1)
		}
		var ev socketEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.typ() == typ {
			seen++
		}
	}
	return read
}

// readToClose reads c until it ends, and returns the events read and how
// it ended.
func readToClose(t *testing.T, c *websocket.Conn) ([]socketEvent, error) {
	t.Helper()
	var events []socketEvent
	for {
		_, data, err := c.Read(t.Context())
		if err != nil {
			return events, err
		}
		var ev socketEvent
		_ = json.Unmarshal(data, &ev)
		events = append(events, ev)
	}
}

// TestFaultSocketClientCuts: the client goes at every point of a turn —
// before any turn, while its turn is held for the only slot, right after
// response.created, mid-deltas (the fake stalls there until the client
// leaves), right after the terminal event. A turn held is cancelled and
// never reaches the provider; one cut after its answer began is forwarded,
// cut short by the client, its charge an estimate; one whose terminal
// event passed is exact.
func TestFaultSocketClientCuts(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, func(cfg config) {
		cfg.set("log.level", "debug")
		cfg.set("account.max_in_flight", 1)
		cfg.set("classes.bulk.max_wait", "60s")
	})
	idle := readIdle(t, p.AdminURL)
	mark := func() (socketLedger, int) { return readSocketLedger(scrape(t, p.AdminURL)), len(fp.Requests()) }
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
		want socketTurnsWant
	}{
		{"before any turn", func(t *testing.T) {
			_ = openSocket(t, p, agentKey).CloseNow()
		}, socketTurnsWant{}},
		{"while held", func(t *testing.T) {
			// The blocker holds the only slot, stalled after a delta until
			// it leaves; the victim's turn waits, and its client goes.
			blocker, victim := openSocket(t, p, agentKey), openSocket(t, p, agentKey)
			if err := blocker.Write(t.Context(), websocket.MessageText, []byte(faultTurn(0, map[string]string{"x-fake-stall-after": "1"}))); err != nil {
				t.Fatal(err)
			}
			readUntil(t, blocker, "response.output_text.delta", 1)
			if err := victim.Write(t.Context(), websocket.MessageText, []byte(faultTurn(1, nil))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the victim's turn held", func() bool {
				return sum(scrape(t, p.AdminURL), "meterproxy_caller_waiting", map[string]string{"caller": "agent"}) == 1
			})
			_ = victim.CloseNow()
			waitFor(t, "the held turn cancelled", func() bool {
				return sum(scrape(t, p.AdminURL), "meterproxy_caller_waiting", map[string]string{"caller": "agent"}) == 0
			})
			_ = blocker.CloseNow()
		}, socketTurnsWant{forwarded: 1, cancelled: 1, cutClient: 1}},
		{"after response.created", func(t *testing.T) {
			c := openSocket(t, p, agentKey)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(faultTurn(2, map[string]string{"x-fake-stall-after": "1"}))); err != nil {
				t.Fatal(err)
			}
			readUntil(t, c, "response.created", 1)
			_ = c.CloseNow()
		}, socketTurnsWant{forwarded: 1, cutClient: 1}},
		{"mid-deltas", func(t *testing.T) {
			c := openSocket(t, p, agentKey)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(faultTurn(3, map[string]string{"x-fake-stall-after": "3"}))); err != nil {
				t.Fatal(err)
			}
			readUntil(t, c, "response.output_text.delta", 2)
			_ = c.CloseNow()
		}, socketTurnsWant{forwarded: 1, cutClient: 1}},
		{"right after the terminal event", func(t *testing.T) {
			c := openSocket(t, p, agentKey)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(faultTurn(4, nil))); err != nil {
				t.Fatal(err)
			}
			readUntil(t, c, "response.completed", 1)
			_ = c.CloseNow()
		}, socketTurnsWant{forwarded: 1, exact: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, from := mark()
			tt.run(t)
			checkSocketCase(t, p, fp, before, from, tt.want)
		})
	}
	if st := fp.Stats(); st.SocketTurns != 4 {
		t.Errorf("the fake served %d socket turns, want 4 (the held one never reached it)", st.SocketTurns)
	}
	checkIdle(t, "proxy", p, idle)
}

// TestFaultSocketUpstreamCuts: the upstream's socket ends without a close
// frame at each of the fake's cut points. Before the terminal event the
// turn is forwarded, cut short by the upstream and settled as an
// estimate; after it, exact. Either way the client is closed 1014 and
// nothing stays in flight.
func TestFaultSocketUpstreamCuts(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, func(cfg config) { cfg.set("log.level", "debug") })
	idle := readIdle(t, p.AdminURL)
	for i, tt := range []struct {
		at   fakeprovider.CutAt
		want socketTurnsWant
	}{
		{fakeprovider.CutAfterCreated, socketTurnsWant{forwarded: 1, cutUp: 1}},
		{fakeprovider.CutMidDeltas, socketTurnsWant{forwarded: 1, cutUp: 1}},
		{fakeprovider.CutBeforeTerminal, socketTurnsWant{forwarded: 1, cutUp: 1}},
		{fakeprovider.CutAfterTerminal, socketTurnsWant{forwarded: 1, exact: true}},
	} {
		t.Run(string(tt.at), func(t *testing.T) {
			before, from := readSocketLedger(scrape(t, p.AdminURL)), len(fp.Requests())
			closedUp := sum(scrape(t, p.AdminURL), "meterproxy_sockets_closed_total", map[string]string{"side": "upstream"})
			c := openSocket(t, p, agentKey)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(faultTurn(i, map[string]string{"x-fake-cut-at": string(tt.at)}))); err != nil {
				t.Fatal(err)
			}
			events, err := readToClose(t, c)
			if code := websocket.CloseStatus(err); code != websocket.StatusBadGateway {
				t.Errorf("the client's socket ended %v after %d events, want 1014", err, len(events))
			}
			completed := len(events) > 0 && events[len(events)-1].typ() == "response.completed"
			if completed != tt.want.exact {
				t.Errorf("the client's last event completed = %v, want %v", completed, tt.want.exact)
			}
			checkSocketCase(t, p, fp, before, from, tt.want)
			if n := sum(scrape(t, p.AdminURL), "meterproxy_sockets_closed_total", map[string]string{"side": "upstream"}) - closedUp; n != 1 {
				t.Errorf("sockets closed by the upstream: %v, want 1", n)
			}
		})
	}
	checkIdle(t, "proxy", p, idle)
}

// TestFaultSocketRedis: one replica on a Redis that goes down — before a
// socket's handshake (the socket opens and its turn is admitted on local
// limits), and mid-session, a turn in flight as Redis dies (it finishes,
// its slot released), a turn on another lane while Redis is down, one
// after it is back. Every turn completes and is metered exactly, and
// nothing stays in flight, on the replica or in Redis.
func TestFaultSocketRedis(t *testing.T) {
	srv := ownedRedis(t)
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, func(cfg config) {
		cfg.set("log.level", "debug")
		cfg.set("store.redis_url", srv.URL())
		cfg.set("store.key_prefix", srv.prefix)
		cfg.set("store.timeout", "100ms")
		cfg.set("store.heartbeat", "500ms")
	})
	idle := readIdle(t, p.AdminURL)
	turn := func(c *websocket.Conn, create string) {
		t.Helper()
		if events := sendTurn(t, c, create); lastOf(events).typ() != "response.completed" {
			t.Fatalf("turn ended %v", lastOf(events))
		}
	}
	t.Run("down at the handshake", func(t *testing.T) {
		before, from := readSocketLedger(scrape(t, p.AdminURL)), len(fp.Requests())
		srv.Kill(t)
		c := openSocket(t, p, agentKey)
		turn(c, faultTurn(0, nil))
		srv.Restart(t)
		turn(c, faultTurn(1, nil))
		_ = c.Close(websocket.StatusNormalClosure, "")
		checkSocketCase(t, p, fp, before, from, socketTurnsWant{forwarded: 2, exact: true})
	})
	t.Run("down mid-session", func(t *testing.T) {
		before, from := readSocketLedger(scrape(t, p.AdminURL)), len(fp.Requests())
		c := openSocket(t, p, agentKey)
		turn(c, faultTurn(2, nil))
		// Lane a's turn holds its terminal event while Redis dies.
		held := createTurn(3, `,"stream_id":"a","metadata":{"x-fake-terminal-delay":"1s"}`)
		if err := c.Write(t.Context(), websocket.MessageText, []byte(held)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "lane a's turn in flight", func() bool {
			return sum(scrape(t, p.AdminURL), "meterproxy_caller_in_flight", map[string]string{"caller": "agent"}) == 1
		})
		srv.Kill(t)
		turn(c, createTurn(4, `,"stream_id":"b"`))
		if ev := readTurn(t, c); lastOf(ev).typ() != "response.completed" || ev[0]["stream_id"] != "a" {
			t.Fatalf("lane a's turn ended %v", lastOf(ev))
		}
		srv.Restart(t)
		turn(c, faultTurn(5, nil))
		_ = c.Close(websocket.StatusNormalClosure, "")
		checkSocketCase(t, p, fp, before, from, socketTurnsWant{forwarded: 4, exact: true})
	})
	srv.waitEmpty(t)
	checkIdle(t, "proxy", p, idle)
	t.Logf("%v failed Redis calls", sum(scrape(t, p.AdminURL), "meterproxy_store_errors_total", nil))
}
