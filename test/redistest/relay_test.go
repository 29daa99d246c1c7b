package redistest

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/redis/go-redis/v9"
)

// TestRelay: through a relay, commands run and are answered; while it
// holds, they still run but a client that gives up on the answer counts
// it abandoned, and one that waits gets it at Release.
func TestRelay(t *testing.T) {
	s := Start(t)
	r := s.Relay(t, "incr")
	direct := s.Client(t)
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	ctx := t.Context()
	key := Prefix(t) + ":n"
	value := func() string { return direct.Get(ctx, key).Val() }
	impatient := func() *redis.Client {
		o := *opts
		o.ReadTimeout = 100 * time.Millisecond
		return closedAtCleanup(t, redis.NewClient(&o))
	}()
	patient := closedAtCleanup(t, redis.NewClient(opts))
	if err := patient.Ping(ctx).Err(); err != nil { // connected before the hold: a handshake's answers are kept back too
		t.Fatal(err)
	}

	if err := impatient.Incr(ctx, key).Err(); err != nil || value() != "1" || r.Answered("incr") != 1 {
		t.Fatalf("INCR through the relay: %v, value %s, %d answered; want 1 and 1", err, value(), r.Answered("incr"))
	}
	r.Hold()
	var netErr net.Error
	if err := impatient.Incr(ctx, key).Err(); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("INCR while the relay holds: %v, want a timeout", err)
	}
	poll.Until(t, "the INCR whose answer was kept back counted abandoned", func() bool { return r.Abandoned("incr") == 1 })
	if value() != "2" {
		t.Fatalf("value %s after an abandoned INCR, want 2: it ran", value())
	}
	got := make(chan error, 1)
	go func() { got <- patient.Incr(ctx, key).Err() }()
	poll.Until(t, "the patient INCR to run while held", func() bool { return value() == "3" })
	if n := r.Answered("incr"); n != 1 {
		t.Fatalf("%d INCRs answered while the relay holds, want 1 (the one before)", n)
	}
	r.Release()
	if err := <-got; err != nil {
		t.Fatalf("the patient INCR after Release: %v", err)
	}
	if a, b := r.Answered("incr"), r.Abandoned("incr"); a != 2 || b != 1 {
		t.Errorf("%d answered, %d abandoned; want 2 and 1", a, b)
	}
}
