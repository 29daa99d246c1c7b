package quota

import (
	"context"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// newStoreFunc builds a Store enforcing l that reads the time from now.
type newStoreFunc func(t *testing.T, l Limits, now func() time.Time) Store

// windowLimits: 10 requests a second for the account, 2 for bulk, 3
// reserved; in flight far from binding.
var windowLimits = Limits{AccountRPM: 600, BulkRPM: 120, ReserveRPM: 180, InFlight: 1000, BulkInFlight: 200, ReserveInFlight: 300, Borrow: true}

// inFlightLimits: 10 in flight, 2 for bulk, 3 reserved; windows far from
// binding.
var inFlightLimits = Limits{AccountRPM: 60000, BulkRPM: 12000, ReserveRPM: 18000, InFlight: 10, BulkInFlight: 2, ReserveInFlight: 3, Borrow: true}

var none [classify.NumClasses]int64

func rel(i, b int64) [classify.NumClasses]int64 { return [classify.NumClasses]int64{i, b} }

// runStoreConformance is the behaviour every Store must have.
func runStoreConformance(t *testing.T, newStore newStoreFunc) {
	const (
		I = classify.Interactive
		B = classify.Bulk
	)
	base := time.Unix(1_700_000_000, 0)
	type step struct {
		at      time.Duration // since base
		class   classify.Class
		want    int64
		release [classify.NumClasses]int64
		granted int64
		blocker Blocker
	}
	big := windowLimits
	noBorrow := big
	noBorrow.Borrow = false
	tests := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"interactive takes the whole window", big, []step{
			{0, I, 15, none, 10, BlockedByWindow},
			{time.Second, I, 5, none, 5, NotBlocked},
		}},
		{"bulk borrows up to the reserve, never into it", big, []step{
			{0, B, 20, none, 7, BlockedByWindow},
			{10 * time.Millisecond, I, 5, none, 3, BlockedByWindow},
		}},
		{"bulk without borrowing keeps to its share", noBorrow, []step{
			{0, B, 20, none, 2, BlockedByWindow},
			{0, I, 20, none, 8, BlockedByWindow},
		}},
		{"a waiting interactive request stops borrowing", big, []step{
			{0, I, 12, none, 10, BlockedByWindow},
			{time.Second, B, 20, none, 2, BlockedByWindow}, // interactive still waiting
			{time.Second + time.Millisecond, I, 2, none, 2, NotBlocked},
			{2 * time.Second, B, 20, none, 7, BlockedByWindow}, // served: borrowing resumes
		}},
		{"windows reset every second", big, []step{
			{0, B, 7, none, 7, NotBlocked},
			{999 * time.Millisecond, B, 1, none, 0, BlockedByWindow},
			{time.Second, B, 7, none, 7, NotBlocked},
		}},
		{"in flight: bulk borrows up to the in-flight reserve", inFlightLimits, []step{
			{0, B, 9, none, 7, BlockedByInFlight},
			{time.Second, I, 9, none, 3, BlockedByInFlight},
			{2 * time.Second, I, 1, none, 0, BlockedByInFlight},
			{2 * time.Second, I, 1, rel(0, 1), 1, NotBlocked}, // a bulk slot returned
		}},
		{"in flight: bulk keeps to its share while interactive waits", inFlightLimits, []step{
			{0, I, 11, none, 10, BlockedByInFlight},
			{time.Second, B, 5, rel(8, 0), 2, BlockedByInFlight},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			s := newStore(t, tt.limits, func() time.Time { return now })
			for i, st := range tt.steps {
				now = base.Add(st.at)
				res, err := s.Take(context.Background(), TakeRequest{Class: st.class, Want: st.want, Release: st.release})
				if err != nil {
					t.Fatalf("step %d: Take: %v", i, err)
				}
				if res.Granted != st.granted || res.Blocker != st.blocker {
					t.Fatalf("step %d (%s want %d): granted %d blocker %d, want %d blocker %d",
						i, st.class, st.want, res.Granted, res.Blocker, st.granted, st.blocker)
				}
				if res.Blocker != NotBlocked && (res.RetryAfter <= 0 || res.RetryAfter > time.Second) {
					t.Fatalf("step %d: RetryAfter %s, want (0, 1s]", i, res.RetryAfter)
				}
			}
		})
	}
	t.Run("release frees in-flight slots", func(t *testing.T) {
		now := base
		s := newStore(t, inFlightLimits, func() time.Time { return now })
		ctx := context.Background()
		if res, _ := s.Take(ctx, TakeRequest{Class: I, Want: 10}); res.Granted != 10 {
			t.Fatalf("granted %d, want 10", res.Granted)
		}
		if err := s.Release(ctx, [classify.NumClasses]int64{4, 0}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		if res, _ := s.Take(ctx, TakeRequest{Class: I, Want: 10}); res.Granted != 4 || res.Blocker != BlockedByInFlight {
			t.Fatalf("after release: %+v, want 4 granted, blocked by in-flight", res)
		}
	})
}

func TestMemoryStoreConformance(t *testing.T) {
	runStoreConformance(t, func(_ *testing.T, l Limits, now func() time.Time) Store {
		return NewMemoryStore(l, now)
	})
}
