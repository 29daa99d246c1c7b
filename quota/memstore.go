package quota

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore is the in-process Store for a single replica: the counters
// live in this process and are lost with it. It is safe for concurrent use;
// its zero value is not usable, call NewMemoryStore.
type MemoryStore struct {
	limits Limits
	now    func() time.Time

	mu       sync.Mutex
	sec      int64 // the window the used counts belong to, Unix seconds
	used     [classify.NumClasses]int64
	inFlight [classify.NumClasses]int64
	// starvedThrough is the last second in which bulk may not borrow
	// because an interactive request was left waiting.
	starvedThrough int64
}

// NewMemoryStore returns an in-process store enforcing limits, reading the
// time from now (time.Now when nil).
func NewMemoryStore(limits Limits, now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{limits: limits, now: now, starvedThrough: math.MinInt64}
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, req TakeRequest) (TakeResult, error) {
	return s.take(s.now(), req), nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, n [classify.NumClasses]int64) error {
	s.mu.Lock()
	s.releaseLocked(n)
	s.mu.Unlock()
	return nil
}

// InFlight returns the requests counted in flight, by class.
func (s *MemoryStore) InFlight() [classify.NumClasses]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

func (s *MemoryStore) releaseLocked(n [classify.NumClasses]int64) {
	for c := range n {
		s.inFlight[c] = max(0, s.inFlight[c]-n[c])
	}
}

func (s *MemoryStore) take(now time.Time, req TakeRequest) TakeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(req.Release)
	sec := now.Unix()
	if sec != s.sec {
		s.sec, s.used = sec, [classify.NumClasses]int64{}
	}
	borrow := s.limits.Borrow && sec > s.starvedThrough
	g := grant(s.limits, sec, req.Class, borrow, s.used, s.inFlight)
	granted := min(req.Want, max(0, min(g.window, g.inFlight)))
	s.used[req.Class] += granted
	s.inFlight[req.Class] += granted
	if req.Class == classify.Interactive {
		if granted < req.Want {
			s.starvedThrough = sec + 1
		} else {
			s.starvedThrough = math.MinInt64
		}
	}
	res := TakeResult{Granted: granted}
	switch {
	case granted == req.Want:
	case g.window <= granted:
		res.Blocker, res.RetryAfter = BlockedByWindow, untilNextSecond(now)
	default:
		res.Blocker, res.RetryAfter = BlockedByInFlight, untilNextSecond(now)
	}
	return res
}

// room is what a class may still take: in this second's window and in flight.
type room struct{ window, inFlight int64 }

// grant applies the partition rules of DESIGN.md to one second. Interactive
// may take anything free. Bulk may take up to its share while the account
// has room; when borrowing it may go further but never into the reserve.
func grant(l Limits, sec int64, c classify.Class, borrow bool, used, inFlight [classify.NumClasses]int64) room {
	account := Allowance(sec, l.AccountRPM)
	total := used[classify.Interactive] + used[classify.Bulk]
	totalInFlight := inFlight[classify.Interactive] + inFlight[classify.Bulk]
	r := room{window: account - total, inFlight: l.InFlight - totalInFlight}
	if c == classify.Interactive {
		return r
	}
	w := Allowance(sec, l.BulkRPM) - used[classify.Bulk]
	f := l.BulkInFlight - inFlight[classify.Bulk]
	if borrow {
		w = max(w, account-Allowance(sec, l.ReserveRPM)-total)
		f = max(f, l.InFlight-l.ReserveInFlight-totalInFlight)
	}
	return room{window: min(r.window, w), inFlight: min(r.inFlight, f)}
}

func untilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}
