//go:build faults

package test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/redis/go-redis/v9"
)

// Issue 31: a Redis that stalls while a budget call is in flight — the
// call runs, its answer comes too late — neither erases spend nor leaks a
// reservation.

// The strings in budget.lua's argument that tell a settle (or release)
// and a reserve apart in the relay.
const (
	opSettle  = `"op":"settle"`
	opReserve = `"op":"reserve"`
)

// budgetStall is two replicas sharing a budget on a Redis behind a relay
// that can make it stall, in front of a fake provider behind a gate.
type budgetStall struct {
	relay    *redistest.Relay
	redis    *redis.Client
	prefix   string
	up       *gatedUpstream
	replicas []*procs.Proxy
	client   *http.Client
	run      *budgetRun
	sent     int
}

// gatedUpstream is a fake provider behind a gate: while shut, a request
// that reaches it says so on arrived and waits for proceed.
type gatedUpstream struct {
	h       http.Handler
	shut    atomic.Bool
	arrived chan struct{}
	proceed chan struct{}
}

func (g *gatedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.shut.Load() {
		select {
		case g.arrived <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		select {
		case <-g.proceed:
		case <-r.Context().Done():
			return
		}
	}
	g.h.ServeHTTP(w, r)
}

func startBudgetStall(t *testing.T) *budgetStall {
	t.Helper()
	srv := redistest.Start(t)
	s := &budgetStall{relay: srv.Relay(t, opSettle, opReserve), redis: srv.Client(t), prefix: redistest.Prefix(t),
		up:     &gatedUpstream{h: fakeprovider.New(fakeprovider.Config{NoLog: true}), arrived: make(chan struct{}), proceed: make(chan struct{})},
		client: newClient(t, 4), run: &budgetRun{refusals: map[string]int{}}}
	cfg := fleetConfig(startUpstream(t, s.up).URL, srv, s.prefix)
	cfg.set("store.redis_url", s.relay.URL())
	cfg.set("store.timeout", "100ms")
	budgetConfig(cfg)
	s.replicas = []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	// Some spend first, through both replicas.
	for range 4 {
		s.send(t, s.replicas[s.sent%2])
	}
	s.waitSettled(t, "the first requests")
	return s
}

// send sends the budgeted caller's next request through p and records
// what its answer cost.
func (s *budgetStall) send(t *testing.T, p *procs.Proxy) {
	t.Helper()
	if !s.run.sendBudgeted(t.Context(), s.client, p.URL, s.sent) || s.run.served != s.sent+1 {
		t.Fatalf("request %d through %s not served: %v %v", s.sent, p.URL, s.run.refusals, s.run.unexpected)
	}
	s.sent++
}

// use returns the budget's spend and reservations as Redis holds them, in
// nanodollars.
func (s *budgetStall) use(t *testing.T) (spent, reserved int64) {
	t.Helper()
	keys, err := s.redis.Keys(t.Context(), "{"+s.prefix+":budget}:caller:nightly-import:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the budget's hash: %v %v, want one", keys, err)
	}
	v, err := s.redis.HMGet(t.Context(), keys[0], "spent", "reserved").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := func(x any) int64 {
		i, _ := strconv.ParseInt(fmt.Sprint(x), 10, 64) // a field not there yet is 0
		return i
	}
	return n(v[0]), n(v[1])
}

// waitSettled waits until Redis holds no reservation and checks it holds
// as spent what the answers served cost (each request's cost is rounded
// to a nanodollar).
func (s *budgetStall) waitSettled(t *testing.T, what string) {
	t.Helper()
	waitFor(t, what+" settled in Redis (no reservation left)", func() bool {
		_, reserved := s.use(t)
		return reserved == 0
	})
	spent, _ := s.use(t)
	if want := s.run.spent * 1e9; math.Abs(float64(spent)-want) > float64(s.sent) {
		t.Fatalf("after %s: Redis holds $%.9f spent, the %d answers served cost $%.9f", what, float64(spent)/1e9, s.sent, s.run.spent)
	}
}

// TestFaultBudgetStall: two replicas share a $1 budget on Redis behind a
// relay that keeps Redis's answers back while the test holds it, so that
// a budget call runs but its replica gives up on it:
//   - a settle whose answer was lost is tried again, and the second try
//     changes nothing: Redis still holds what every answer cost (it used to
//     be taken for a reaped reservation and refunded again, erasing spend);
//   - a reserve whose answer was lost (the request refused 503
//     store_unavailable) is released once Redis answers again: the
//     reservation it made is gone and nothing was spent (it used to hold
//     its worst case until the replica died, then be charged in full).
func TestFaultBudgetStall(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *budgetStall)
	}{
		{"a settle whose answer was lost", func(t *testing.T, s *budgetStall) {
			s.up.shut.Store(true)
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.run.sendBudgeted(context.WithoutCancel(t.Context()), s.client, s.replicas[0].URL, s.sent)
			}()
			<-s.up.arrived // reserved: the request reached the provider
			s.relay.Hold()
			s.up.shut.Store(false)
			s.up.proceed <- struct{}{}
			<-done
			s.sent++
			waitFor(t, "the settle to run while Redis's answer is kept back, and its replica to give up", func() bool {
				return s.relay.Abandoned(opSettle) > 0
			})
			answered := s.relay.Answered(opSettle)
			s.relay.Release()
			waitFor(t, "the settle tried again and answered", func() bool { return s.relay.Answered(opSettle) > answered })
			s.waitSettled(t, "a settle tried again")
			s.send(t, s.replicas[1]) // and the fleet goes on counting
			s.waitSettled(t, "one more request")
		}},
		{"a reserve whose answer was lost", func(t *testing.T, s *budgetStall) {
			spent, _ := s.use(t)
			s.relay.Hold()
			status, _, body := post(t, s.client, s.replicas[0].URL+"/v1/chat/completions",
				fmt.Sprintf(budgetShapes[0].body, budgetMaxTokens, s.sent), map[string]string{"Authorization": "Bearer " + importKey})
			if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "store_unavailable") {
				t.Fatalf("a budgeted request while Redis's answers are kept back: %d %s, want 503 store_unavailable", status, body)
			}
			waitFor(t, "the reserve to have run, its replica given up on its answer", func() bool { return s.relay.Abandoned(opReserve) > 0 })
			if _, reserved := s.use(t); reserved == 0 {
				t.Fatal("the reserve whose answer was lost reserved nothing")
			}
			s.relay.Release()
			s.waitSettled(t, "the reservation whose answer was lost")
			if now, _ := s.use(t); now != spent {
				t.Errorf("the released reservation changed what was spent: %d, was %d nanodollars", now, spent)
			}
			s.send(t, s.replicas[1])
			s.waitSettled(t, "one more request")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, startBudgetStall(t)) })
	}
}
