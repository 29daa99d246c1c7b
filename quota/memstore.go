package quota

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

var _ store = (*memoryStore)(nil)

// memoryStore is the in-process Store for a single replica: the counters
// live in this process, per pool, and are lost with it. It is safe for
// concurrent use; its zero value is not usable, call newMemoryStore.
type memoryStore struct {
	now func() time.Time

	mu    sync.Mutex
	pools map[string]*memoryPool
}

// memoryPool is one pool's counters in a memoryStore.
type memoryPool struct {
	win      window
	inFlight PerClass
	// starvedThrough is the last second in which bulk may not borrow
	// because an interactive request was left waiting.
	starvedThrough int64
	upstream       upstreamState
	output         outputBucket
}

// newMemoryStore returns an in-process store, reading the time from now
// (time.Now when nil). Each call brings the limits it enforces.
func newMemoryStore(now func() time.Time) *memoryStore {
	if now == nil {
		now = time.Now
	}
	return &memoryStore{now: now, pools: map[string]*memoryPool{}}
}

// Take implements Store.
func (s *memoryStore) Take(_ context.Context, req takeRequest) (takeResult, error) {
	return s.take(s.now(), req), nil
}

func (s *memoryStore) take(now time.Time, req takeRequest) takeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[req.Pool]
	if p == nil {
		p = &memoryPool{starvedThrough: math.MinInt64}
		s.pools[req.Pool] = p
	}
	return p.take(now, req)
}

func (s *memoryPool) take(now time.Time, req takeRequest) takeResult {
	sec := now.Unix()
	if sec != s.win.sec {
		s.win = s.win.next(sec, req.Limits.AccountTPM)
	}
	s.inFlight = req.InFlight
	borrow := func(interactiveShort bool) bool {
		if interactiveShort {
			s.starvedThrough = sec + 1
		} else if req.Want[classify.Interactive] > 0 {
			s.starvedThrough = math.MinInt64
		}
		return sec > s.starvedThrough
	}
	s.upstream.apply(req.Upstream, now)
	bulkMs, interactiveMs := s.output.take(now.UnixMilli(), req.Output, req.Limits.OutputTPM, req.Limits.ReserveOutputTPM)
	res := takeResult{UpstreamHold: max(s.upstream.hold(now), time.Duration(bulkMs)*time.Millisecond)}
	outputWait := time.Duration(interactiveMs) * time.Millisecond
	held := [classify.NumClasses]bool{classify.Interactive: outputWait > 0, classify.Bulk: res.UpstreamHold > 0}
	res.Granted, res.Blocker = grantAll(req.Limits, sec, req, held, borrow, &s.win, &s.inFlight)
	res.RetryAfter = retryAfter(now, res.Blocker, 0, res.UpstreamHold, outputWait)
	res.FleetInFlight = s.inFlight
	for c := range res.FleetCredits {
		res.FleetCredits[c] = min(req.Credits[c], s.inFlight[c])
	}
	res.Window = WindowUse{Sec: sec, Requests: s.win.used, Tokens: s.win.tokens}
	for c, n := range res.Window.Tokens {
		res.Window.Tokens[c] = max(0, n) // credit is room, not use
	}
	res.SecondLeft = untilNextSecond(now)
	return res
}
