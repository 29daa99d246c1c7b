package quota

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// fairConfig admits 3 interactive requests a second, the whole account,
// with room for everything to queue.
func fairConfig(f fairness) Config {
	cfg := DefaultConfig()
	cfg.Account.RequestsPerMinute = 180
	cfg.Account.MaxInFlight = 1000
	cfg.Classes.Interactive = interactiveConfig{Share: 1, MaxWait: time.Hour, MaxQueue: 1000, Fairness: f}
	cfg.Classes.Bulk = BulkConfig{MaxWait: time.Hour, MaxQueue: 10, Fairness: f}
	return cfg
}

// fairRun queues, in this order, n requests of each caller of sends (each
// costing its cost), plus late ones at their arrival times, on a limiter
// of cfg with weights, and returns who was granted, in order, within
// runFor.
type fairSend struct {
	caller string
	// anon, when set, sends as an unknown caller whose credential hashes
	// to it (recorded under caller).
	anon uint64
	n    int
	cost int64
	at   time.Duration // 0: at the start
}

func fairRun(t *testing.T, cfg Config, weights map[string]float64, sends []fairSend, runFor time.Duration) []string {
	t.Helper()
	l, _ := testLimiter(t, cfg)
	l.setWeights(weights)
	var mu sync.Mutex
	var order []string
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range sends {
		time.Sleep(max(0, time.Until(start.Add(s.at))))
		for range s.n {
			wg.Go(func() {
				req := Request{Class: classify.Interactive, Caller: s.caller, Tokens: s.cost}
				if s.anon != 0 {
					req.Caller, req.Anonymous = classify.UnknownCaller, s.anon
				}
				if _, err := l.Admit(ctx, req); err == nil {
					mu.Lock()
					order = append(order, s.caller)
					mu.Unlock()
				}
			})
			synctest.Wait() // each joins the queue before the next
		}
	}
	time.Sleep(max(0, time.Until(start.Add(runFor))))
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return order
}

func count(order []string) map[string]int {
	n := map[string]int{}
	for _, c := range order {
		n[c]++
	}
	return n
}

// TestFairSharesByWeight: two backlogged callers of weights 2 and 1 share
// the class 2:1, whatever the order they queued in.
func TestFairSharesByWeight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairCallers), map[string]float64{"a": 2},
			[]fairSend{{caller: "a", n: 60}, {caller: "b", n: 60}}, 10*time.Second-time.Millisecond)
		// a's first grants go before b has queued: ±1.
		n := count(order)
		if n["a"]+n["b"] != 30 || n["a"] < 19 || n["a"] > 21 {
			t.Fatalf("grants %v in 10 s at 3 a second; want a 20 and b 10 (weights 2:1), ±1", n)
		}
	})
}

// TestFairNewcomerServedNext: a caller that arrives behind another's
// backlog of 30 is served by the very next grant.
func TestFairNewcomerServedNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairCallers), nil,
			[]fairSend{{caller: "flood", n: 30}, {caller: "report", n: 1, at: 2500 * time.Millisecond}}, 4*time.Second-time.Millisecond)
		// Seconds 0, 1 and 2 grant 3 each to the flood; second 3's grants
		// (one store call, answered in any order) include the report.
		if len(order) != 12 || count(order[:9])["report"] != 0 || count(order[9:])["report"] != 1 {
			t.Fatalf("grants %v; want the report among the fourth second's", order)
		}
	})
}

// TestFairAloneGetsAll: a caller alone in its class gets all of it, and
// one idle for a while banks nothing: when another caller returns, they
// share from then on.
func TestFairAloneGetsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairCallers), nil,
			[]fairSend{{caller: "a", n: 40}, {caller: "b", n: 40, at: 4500 * time.Millisecond}}, 10*time.Second-time.Millisecond)
		first, rest := count(order[:15]), count(order[15:])
		if first["a"] != 15 {
			t.Fatalf("the first 5 s went %v; want all 15 to a, alone", first)
		}
		if rest["a"] < 7 || rest["a"] > 8 || rest["b"] < 7 || rest["b"] > 8 {
			t.Fatalf("after b arrived, grants %v; want them shared evenly (b banked nothing while away)", rest)
		}
	})
}

// TestFairTokensWeighted: with tokens enforced, service is counted in
// tokens: a caller of 50-token requests and one of 10-token requests,
// equal weights, get about equal tokens, so five times the requests for
// the second.
func TestFairTokensWeighted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairConfig(fairCallers)
		cfg.Account.RequestsPerMinute = 60000
		cfg.Account.TokensPerMinute = 6000 // 100 a second
		order := fairRun(t, cfg, nil, []fairSend{{caller: "big", n: 40, cost: 50}, {caller: "small", n: 200, cost: 10}}, 10*time.Second-time.Millisecond)
		n := count(order)
		tokensBig, tokensSmall := 50*n["big"], 10*n["small"]
		if diff := tokensBig - tokensSmall; diff < -100 || diff > 100 {
			t.Fatalf("grants %v: big %d tokens, small %d; want about equal", n, tokensBig, tokensSmall)
		}
	})
}

// TestFairFIFOUnchanged: fairness fifo serves in arrival order, whoever
// sent: the caller that queued first gets everything it queued first.
func TestFairFIFOUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairFIFO), map[string]float64{"b": 5},
			[]fairSend{{caller: "a", n: 30}, {caller: "b", n: 30}}, 10*time.Second-time.Millisecond)
		for i, c := range order {
			if c != "a" {
				t.Fatalf("grant %d went to %s: FIFO serves a's 30 first (grants %v)", i, c, order)
			}
		}
		if len(order) != 30 {
			t.Fatalf("%d grants in 10 s, want 30", len(order))
		}
	})
}

// TestFairAnonymousCallersApart: two unknown callers, told apart by their
// credentials, share the class evenly, as two configured callers would.
func TestFairAnonymousCallersApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairCallers), nil,
			[]fairSend{{caller: "key1", anon: 1, n: 30}, {caller: "key2", anon: 2, n: 30}}, 10*time.Second-time.Millisecond)
		if n := count(order); n["key1"] < 14 || n["key1"] > 16 || n["key1"]+n["key2"] != 30 {
			t.Fatalf("grants %v in 10 s; want 15 each, ±1", n)
		}
	})
}

// TestFairAnonymousBounded: a flood of made-up keys gets at most
// maxAnonFlows flows of its own, the rest sharing one, and the state
// stays bounded; once they fall idle, a new key gets its own flow again.
func TestFairAnonymousBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairConfig(fairCallers)
		cfg.Account.RequestsPerMinute = 60 * 1000
		l, _ := testLimiter(t, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		q, cq := &l.queue, &l.queue.classes[classify.Interactive]
		q.mu.Lock() // queue them all before the loop serves any
		for key := range uint64(500) {
			w := &waiter{done: make(chan struct{}), fairTag: fairTag{flow: cq.fair.flowOf(classify.UnknownCaller, key+1), span: 1}}
			cq.enqueue(w)
		}
		fs := &cq.fair
		if fs.anon != maxAnonFlows || len(fs.finish) != maxAnonFlows+1 {
			t.Fatalf("500 keys: %d flows of their own, %d in all; want %d and %d", fs.anon, len(fs.finish), maxAnonFlows, maxAnonFlows+1)
		}
		q.mu.Unlock()
		store.Notify(l.sig.arrive)
		// Served within the first second (1000 a second); then idle.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if _, err := l.Admit(ctx, Request{Class: classify.Interactive, Caller: classify.UnknownCaller, Anonymous: 1000}); err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if fs.anon > maxAnonFlows || fs.finish[flowKey{caller: classify.UnknownCaller, anon: 1000}] == 0 {
			t.Fatalf("after the flood went idle, %d flows of their own and the new key's finish %v; want the new key to have its own",
				fs.anon, fs.finish[flowKey{caller: classify.UnknownCaller, anon: 1000}])
		}
	})
}

// TestFairServiceCorrected: service in tokens is settled to what each
// request really used: a caller whose estimates are five times its use
// gets about the requests of one whose estimates are exact (uncorrected,
// it would get a fifth of them).
func TestFairServiceCorrected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairConfig(fairCallers)
		cfg.Account.RequestsPerMinute = 60000
		cfg.Account.TokensPerMinute = 6000 // 100 a second
		l, _ := testLimiter(t, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		n := map[string]int{}
		var wg sync.WaitGroup
		for _, c := range []struct {
			caller   string
			estimate int64
		}{{"over", 50}, {"exact", 10}} {
			for range 5 { // closed loop: each worker sends again when served
				wg.Go(func() {
					for ctx.Err() == nil {
						lease, err := l.Admit(ctx, Request{Class: classify.Interactive, Caller: c.caller, Tokens: c.estimate})
						if err != nil {
							return
						}
						lease.Settle(Outcome{Status: 200, Usage: &Usage{Tokens: 10, Settles: true}})
						lease.Release()
						mu.Lock()
						n[c.caller]++
						mu.Unlock()
					}
				})
			}
		}
		time.Sleep(20 * time.Second)
		cancel()
		wg.Wait()
		if ratio := float64(n["over"]) / float64(n["exact"]); ratio < 0.7 || ratio > 1.3 {
			t.Fatalf("grants %v: over/exact %.2f; want about 1 (service settled to the real 10 tokens each)", n, ratio)
		}
	})
}

// TestFairAnonymousTakeOneShare: unknown callers together weigh as one
// caller of weight 1 (issue 21, item 8). One client with 64 made-up keys,
// three requests each, against two configured callers of weight 1 takes a
// third of the class, whether it queued before them or after; before, each
// key was a caller of its own and the client took 64 shares of 66.
func TestFairAnonymousTakeOneShare(t *testing.T) {
	keys := make([]fairSend, 64)
	for i := range keys {
		keys[i] = fairSend{caller: "anonymous", anon: uint64(i + 1), n: 3}
	}
	configured := []fairSend{{caller: "a", n: 40}, {caller: "b", n: 40}}
	for _, tt := range []struct {
		name  string
		sends []fairSend
	}{
		{"after the callers", append(slices.Clone(configured), keys...)},
		{"before the callers", append(slices.Clone(keys), configured...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := count(fairRun(t, fairConfig(fairCallers), nil, tt.sends, 10*time.Second-time.Millisecond))
				// The first second's 3 may go before the rest have queued: ±2.
				if n["a"]+n["b"]+n["anonymous"] != 30 || n["anonymous"] < 8 || n["anonymous"] > 12 || n["a"] < 8 || n["b"] < 8 {
					t.Fatalf("grants %v in 10 s at 3 a second; want 10 each (±2): the 64 keys together one share", n)
				}
			})
		})
	}
}

// TestFairAnonymousNewcomerServedNext: among unknown callers, credentials
// still share by turns: a key that arrives behind another key's backlog of
// 30 is served by the share's very next grant, here the next grant of all.
func TestFairAnonymousNewcomerServedNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		order := fairRun(t, fairConfig(fairCallers), nil,
			[]fairSend{{caller: "flood", anon: 1, n: 30}, {caller: "report", anon: 2, n: 1, at: 2500 * time.Millisecond}}, 4*time.Second-time.Millisecond)
		if len(order) != 12 || count(order[:9])["report"] != 0 || count(order[9:])["report"] != 1 {
			t.Fatalf("grants %v; want the report among the fourth second's", order)
		}
	})
}

// TestFairUnknownQueueOrder drives a class's fair queuing directly through
// a long deterministic run of arrivals (configured and unknown callers,
// many keys), grants at the head and departures from anywhere, and checks
// after each step what admission relies on: the queue in order of start
// tags, the unknown callers' waiters in it in the order of their sub tags,
// and their list linking exactly the unknown waiters queued.
func TestFairUnknownQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 8)) //nolint:gosec // G404: a fixed seed, so every run takes the same steps
	var f fairShare
	f.on = true
	var q queue
	var queued []*waiter
	for step := range 5000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(queued) == 0: // arrival
			w := &waiter{fairTag: fairTag{tagged: true, span: float64(1 + rng.IntN(3))}}
			if rng.IntN(3) == 0 {
				w.flow = f.flowOf("configured-"+strconv.Itoa(rng.IntN(3)), 0)
			} else {
				w.flow = f.flowOf(classify.UnknownCaller, rng.Uint64N(100))
			}
			f.enqueue(&q, w)
			queued = append(queued, w)
		case r < 8: // the head is granted
			w := q.head
			w.granted = true
			f.dequeue(&q, w)
			queued = slices.DeleteFunc(queued, func(x *waiter) bool { return x == w })
		default: // one leaves ungranted
			i := rng.IntN(len(queued))
			f.dequeue(&q, queued[i])
			queued = slices.Delete(queued, i, i+1)
		}
		var unknownInQ []*waiter
		n := 0
		for w := q.head; w != nil; w = w.next {
			if w.next != nil && w.next.tag < w.tag {
				t.Fatalf("step %d: start tags out of order: %v before %v", step, w.tag, w.next.tag)
			}
			if w.flow.unknown() {
				unknownInQ = append(unknownInQ, w)
			}
			n++
		}
		var listed []*waiter
		for w := f.unknown.head; w != nil; w = w.unext {
			if w.unext != nil && w.unext.sub < w.sub {
				t.Fatalf("step %d: sub tags out of order among unknown callers: %v before %v", step, w.sub, w.unext.sub)
			}
			listed = append(listed, w)
		}
		if n != len(queued) || q.n != n || !slices.Equal(listed, unknownInQ) {
			t.Fatalf("step %d: %d queued, q holds %d (n %d); unknown callers listed %d, in q %d (or in another order)",
				step, len(queued), n, q.n, len(listed), len(unknownInQ))
		}
	}
}
