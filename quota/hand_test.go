package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// heldStore is a store.Memory whose calls the test holds out: while hold is
// set, each call says so on out and waits for release before the store
// decides, so the test can change the queue while a call is out.
type heldStore struct {
	*store.Memory
	hold    atomic.Bool
	out     chan struct{}
	release chan struct{}
}

func (s *heldStore) Take(ctx context.Context, req store.TakeRequest) (store.TakeResult, error) {
	if s.hold.Load() {
		s.out <- struct{}{}
		<-s.release
	}
	return s.Memory.Take(ctx, req)
}

// heldLimiter runs a limiter of cfg over a heldStore inside a synctest
// bubble until the test ends.
func heldLimiter(t *testing.T, cfg Config) (*limiter, *heldStore) {
	t.Helper()
	s := &heldStore{Memory: store.NewMemory(nil), out: make(chan struct{}), release: make(chan struct{})}
	l := newLimiter(cfg, cfg.PerReplica(), s, 0, slog.New(slog.DiscardHandler))
	runtest.Start(t, l)
	// Before Run stops (cleanups run last first): Run's last call tells
	// the store what is in flight.
	t.Cleanup(func() { s.hold.Store(false) })
	return l, s
}

// identityConfig shares interactive between callers by tokens: 10,000
// tokens a second, requests and in flight far from binding.
func identityConfig() Config {
	cfg := fairConfig(fairCallers)
	cfg.Account.RequestsPerMinute = 60000
	cfg.Account.TokensPerMinute = 600000
	return cfg
}

// admitIn admits an interactive request of caller costing tokens in the
// background; its error (nil once admitted) arrives on the channel.
func admitIn(ctx context.Context, l *limiter, caller string, tokens int64) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := l.Admit(ctx, Request{Class: classify.Interactive, Caller: caller, Tokens: tokens})
		errc <- err
	}()
	return errc
}

// TestGrantsGoToTheWaitersListed: the store decides a call's grants for
// the waiters the call listed, charging each its estimate, so the grants
// go to those waiters, whoever else joined or left while the call was
// out. Handed out by count from the head of the fairly ordered queue, a
// 100,000-token newcomer ordered ahead of a 500-token waiter took the
// grant charged 500, and a grant whose waiter left went to the next in
// line at the leaver's charge: the window was charged 1,500 tokens for
// 101,000 admitted. Each case checks the window is charged exactly what
// was admitted.
func TestGrantsGoToTheWaitersListed(t *testing.T) {
	t.Run("a newcomer while the call is out", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, s := heldLimiter(t, identityConfig())
			if err := <-admitIn(t.Context(), l, "steady", 500); err != nil { // its flow is ahead now
				t.Fatal(err)
			}
			s.hold.Store(true)
			listed := admitIn(t.Context(), l, "steady", 500)
			<-s.out // the call listing it is out
			newcomer := admitIn(t.Context(), l, "big", 100000)
			synctest.Wait() // queued ahead of the listed waiter: an idle flow starts at the virtual time
			s.hold.Store(false)
			s.release <- struct{}{}
			for _, errc := range []<-chan error{listed, newcomer} {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			checkCharged(t, l, 500+500+100000)
		})
	})
	t.Run("a listed waiter leaves while the call is out", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, s := heldLimiter(t, identityConfig())
			s.hold.Store(true)
			first := admitIn(t.Context(), l, "steady", 500)
			<-s.out // a call for the first alone
			leaver, leave := context.WithCancel(t.Context())
			left := admitIn(leaver, l, "steady", 500)
			stays := admitIn(t.Context(), l, "steady", 500)
			synctest.Wait()
			s.release <- struct{}{} // the first goes; the next call lists the other two
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			<-s.out
			leave()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Fatalf("the leaver: %v, want context.Canceled", err)
			}
			newcomer := admitIn(t.Context(), l, "big", 50000)
			synctest.Wait()
			s.hold.Store(false)
			s.release <- struct{}{}
			for _, errc := range []<-chan error{stays, newcomer} {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			checkCharged(t, l, 500+500+50000)
		})
	})
}

// checkCharged fails t unless the store's window holds want tokens, the
// estimates of every request admitted, at the store's last answer.
func checkCharged(t *testing.T, l *limiter, want int64) {
	t.Helper()
	w := l.Window()
	if got := w.Tokens[classify.Interactive] + w.Tokens[classify.Bulk]; got != want {
		t.Fatalf("the window was charged %d tokens for %d admitted (second %d, %v)", got, want, w.Sec, w.Tokens)
	}
	if now := time.Now().Unix(); w.Sec != now {
		t.Fatalf("the window is of second %d, now is %d: the case must run within one second", w.Sec, now)
	}
}
