package quota

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// TestLeaseAnswered: a released lease settled Measured counts in its
// pool's measurement by how its upstream exchange ended — 2xx a
// completion with its latency from grant to release and its output as
// work, 429 a throttle, 5xx and no answer (0) a failure, a caller's 4xx
// nothing — and a lease never measured counts nothing, its output
// included, but its time in flight. Counted once, at release.
func TestLeaseAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := testLimiter(t, smallConfig())
		serve := func(status int, took time.Duration, output int64) {
			t.Helper()
			lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(took) // the fake clock of the bubble: the request's duration
			o := Outcome{Status: max(status, 0), Measured: status >= 0}
			if output > 0 {
				o.Usage = &Usage{Priced: price.Usage{Output: output}}
			}
			if status >= 0 || output > 0 {
				lease.Settle(o)
			}
			lease.Release()
			lease.Release()
		}
		serve(200, 300*time.Millisecond, 50)
		serve(204, 100*time.Millisecond, 0)
		serve(429, time.Millisecond, 0)
		serve(503, time.Millisecond, 0)
		serve(0, time.Millisecond, 0)
		serve(400, time.Millisecond, 0)
		serve(-1, time.Millisecond, 0)  // never answered: refused before the upstream, or the client left
		serve(-1, time.Millisecond, 70) // a caller's own key's answer is not Measured: its output is no work here
		got := l.leases.adapt.take(time.Now())
		want := store.AdaptCounts{Completed: 2, Work: 50, Latency: 400 * time.Millisecond, Throttled: 1, Failures: 2,
			Busy: 406 * time.Millisecond} // every lease's time in flight, answered or not
		if got != want {
			t.Errorf("counts = %+v, want %+v", got, want)
		}
		if again := l.leases.adapt.take(time.Now()); again != (store.AdaptCounts{}) {
			t.Errorf("second take = %+v, want nothing", again)
		}
	})
}

// TestLeaseBusy: the ledger's busy time is the time leases were in flight
// between two takes, those still in flight at a take included up to it
// and counted on from there at the next.
func TestLeaseBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := testLimiter(t, smallConfig())
		admit := func() *Lease {
			t.Helper()
			lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			return lease
		}
		take := func(want time.Duration) {
			t.Helper()
			if got := l.leases.adapt.take(time.Now()).Busy; got != want {
				t.Errorf("busy %v, want %v", got, want)
			}
		}
		first := admit()
		time.Sleep(time.Second)
		take(time.Second)
		time.Sleep(time.Second)
		second := admit()
		time.Sleep(time.Second)
		first.Release()
		take(3 * time.Second) // the first's two, the second's one
		time.Sleep(time.Second)
		second.Release()
		time.Sleep(time.Second)
		take(time.Second)
		take(0)
	})
}

// TestSaturationFromStoreAnswer: the admission loop marks the interval
// saturated when a store answer finds the in-flight bound binding — a
// waiter blocked by it, or the fleet at it — and not while the bound has
// room.
func TestSaturationFromStoreAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.RequestsPerMinute, cfg.Account.MaxInFlight = 6000, 3
		l, _ := testLimiter(t, cfg)
		lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := l.leases.adapt.take(time.Now()); got.Saturated {
			t.Errorf("1 of 3 in flight: saturated")
		}
		var leases []*Lease
		for range 2 {
			ls, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, ls)
		}
		synctest.Wait()
		if got := l.leases.adapt.take(time.Now()); !got.Saturated {
			t.Errorf("3 of 3 in flight: not saturated")
		}
		waiting := make(chan *Lease)
		go func() {
			ls, _ := l.Admit(t.Context(), Request{Class: classify.Interactive})
			waiting <- ls
		}()
		synctest.Wait()
		if got := l.leases.adapt.take(time.Now()); !got.Saturated {
			t.Errorf("a waiter blocked by the bound: not saturated")
		}
		lease.Release()
		(<-waiting).Release()
		for _, ls := range leases {
			ls.Release()
		}
	})
}

// TestNoteAnswer is the rule on its own: blocked in flight with waiters,
// or the fleet at the bound; not a class blocked by its window, nor one
// blocked in flight that wanted nothing.
func TestNoteAnswer(t *testing.T) {
	const I, B = classify.Interactive, classify.Bulk
	for _, tc := range []struct {
		name  string
		want  store.PerClass
		res   store.TakeResult
		bound int64
		sat   bool
	}{
		{"room", store.PerClass{1, 1}, store.TakeResult{FleetInFlight: store.PerClass{3, 3}}, 10, false},
		{"fleet at bound", store.PerClass{}, store.TakeResult{FleetInFlight: store.PerClass{4, 6}}, 10, true},
		{"bulk blocked in flight", store.PerClass{0, 2}, store.TakeResult{Blocker: [classify.NumClasses]store.Blocker{B: store.BlockedByInFlight}}, 10, true},
		{"window", store.PerClass{2, 2}, store.TakeResult{Blocker: [classify.NumClasses]store.Blocker{I: store.BlockedByWindow, B: store.BlockedByWindow}}, 10, false},
		{"blocked, no waiters", store.PerClass{}, store.TakeResult{Blocker: [classify.NumClasses]store.Blocker{I: store.BlockedByInFlight}}, 10, false},
	} {
		var a adaptLedger
		a.noteAnswer(tc.want, tc.res, tc.bound)
		if got := a.take(time.Now()).Saturated; got != tc.sat {
			t.Errorf("%s: saturated = %v, want %v", tc.name, got, tc.sat)
		}
	}
}
