package store

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

var _ Store = (*Memory)(nil)

// Memory is the in-process Store for a single replica: the counters
// live in this process, per pool, and are lost with it. It is safe for
// concurrent use; its zero value is not usable, call NewMemory.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	pools map[string]*memoryPool
}

// memoryPool is one pool's counters in a Memory.
type memoryPool struct {
	win      Window
	inFlight PerClass
	// starvedThrough is the last second in which bulk may not borrow
	// because an interactive request was left waiting.
	starvedThrough int64
	upstream       UpstreamState
	output         outputBucket
}

// NewMemory returns an in-process store, reading the time from now
// (time.Now when nil). Each call brings the limits it enforces.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, pools: map[string]*memoryPool{}}
}

// Take implements Store.
func (s *Memory) Take(_ context.Context, req TakeRequest) (TakeResult, error) {
	return s.take(s.now(), req), nil
}

func (s *Memory) take(now time.Time, req TakeRequest) TakeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[req.Pool]
	if p == nil {
		p = &memoryPool{starvedThrough: math.MinInt64}
		s.pools[req.Pool] = p
	}
	return p.take(now, req)
}

func (s *memoryPool) take(now time.Time, req TakeRequest) TakeResult {
	sec := now.Unix()
	if sec != s.win.Sec {
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
	s.upstream.Apply(req.Upstream, now)
	bulkMs, interactiveMs := s.output.take(now.UnixMilli(), req.Output, req.Limits.OutputTPM, req.Limits.ReserveOutputTPM)
	res := TakeResult{UpstreamHold: max(s.upstream.hold(now), time.Duration(bulkMs)*time.Millisecond)}
	outputWait := time.Duration(interactiveMs) * time.Millisecond
	held := [classify.NumClasses]bool{classify.Interactive: outputWait > 0, classify.Bulk: res.UpstreamHold > 0}
	res.Granted, res.Blocker = GrantAll(req.Limits, sec, req, held, borrow, &s.win, &s.inFlight)
	res.RetryAfter = retryAfter(now, res.Blocker, 0, res.UpstreamHold, outputWait)
	res.FleetInFlight = s.inFlight
	for c := range res.FleetCredits {
		res.FleetCredits[c] = min(req.Credits[c], s.inFlight[c])
	}
	res.Window = WindowUse{Sec: sec, Requests: s.win.Used, Tokens: s.win.Tokens}
	for c, n := range res.Window.Tokens {
		res.Window.Tokens[c] = max(0, n) // credit is room, not use
	}
	res.SecondLeft = UntilNextSecond(now)
	return res
}
