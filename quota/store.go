package quota

import (
	"context"
	"errors"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// PerClass holds one number per class, indexed by classify.Class.
type PerClass [classify.NumClasses]int64

// store holds the counters admission decisions are made on, per pool: the
// current one-second window and the requests in flight. Each pool's
// limiter calls Take from one goroutine at a time; stores are safe for
// concurrent use across pools.
type store interface {
	// Take records that this replica holds req.InFlight requests in flight
	// (absolute, by class), then grants up to req.Want admissions per class,
	// interactive first, as the window, the partition, the reserve and the
	// in-flight bound allow, and counts them in flight. One call serves
	// both classes and carries every release since the last: a batch costs
	// one round trip.
	Take(ctx context.Context, req takeRequest) (takeResult, error)
}

// ErrStoreUnavailable means the store failed and store.on_error is
// "closed": callers get a 503 instead of unlimited or local admission.
var ErrStoreUnavailable = errors.New("quota: store unavailable")

// takeRequest asks a Store for admissions.
type takeRequest struct {
	// Pool is the pool the call is for (pool.go); accountPool for the
	// account.
	Pool string
	// Want is how many requests of each class are waiting.
	Want PerClass
	// InFlight is how many requests of each class this replica has in flight
	// now, not counting what this call grants.
	InFlight PerClass
	// Upstream is what the upstream's own headers said since the last call,
	// or nil.
	Upstream *upstreamReport
	// Waiters are, per class, the waiters to grant, in the order grants go
	// to them: each one's capped caller (an index into Caps) and token
	// estimate. When set, Want is its length. Nil when tokens are not
	// enforced and no waiter of the class is capped: Want alone says how
	// many, all uncapped.
	Waiters [classify.NumClasses][]queued
	// Caps are the capped callers this call concerns: those with waiters
	// in Waiters, and those whose in-flight count the store must hear.
	Caps []capTake
	// Corrections are, per class, real usage minus the estimates charged
	// for requests that ended since the last call; added to this window.
	Corrections PerClass
	// Limits are what the store enforces in this call; they arrive with
	// every call, never at construction, so a reload takes effect on the
	// next one. A call with zero limits (a flush) grants nothing.
	Limits Limits
	// LocalLimits are a fallback store's per-replica limits (store.on_error
	// local), used in place of Limits while the shared store fails.
	LocalLimits Limits
}

// queued is one waiter in a takeRequest.
type queued struct {
	// Cap is its caller's position in takeRequest.Caps plus one; 0 for a
	// caller without a cap.
	Cap int
	// Cost is its token estimate (0 when tokens are not enforced).
	Cost int64
}

// capTake is one capped caller in a takeRequest.
type capTake struct {
	Name string
	// InFlight is how many of its requests this replica has in flight now
	// (absolute), not counting what this call grants.
	InFlight int64
	// Cap is what the store enforces across the fleet; Local the
	// per-replica fallback (store.on_error local). A bound of unbounded is
	// none.
	Cap, Local capBounds
}

// capResult is a store's answer for one capTake.
type capResult struct {
	// Granted is how many of its waiters were granted, by class.
	Granted PerClass
	// FleetInFlight is its count in flight across the fleet after the call.
	FleetInFlight int64
	// Full says its cap left one of its waiters waiting.
	Full bool
}

// upstreamReport is the freshest account state a replica observed in the
// upstream's responses. Durations are relative, so stores key them on
// their own clock (Redis TIME) and replicas' clocks never matter.
type upstreamReport struct {
	// Age is how long ago the observation was made.
	Age time.Duration
	// Hold is how long after the observation bulk must be held because the
	// account's remaining allowance was below the interactive reserve;
	// 0 means it was above, which lifts an older hold.
	Hold time.Duration
	// ThrottleFor is how long from now bulk must be held because the
	// upstream answered 429 with a retry hint; fresher observations do not
	// lift it. 0 means none.
	ThrottleFor time.Duration
}

// blocker says what stopped a Take from granting everything it was asked.
type blocker uint8

const (
	// notBlocked means everything asked for was granted.
	notBlocked blocker = iota
	// blockedByWindow means the class's allowance in this second is spent;
	// more is possible after RetryAfter.
	blockedByWindow
	// blockedByInFlight means the in-flight bound is reached; more is
	// possible when slots are released.
	blockedByInFlight
	// blockedByUpstream means bulk is held because the upstream reported
	// the account below the interactive reserve, or answered 429; more is
	// possible after RetryAfter.
	blockedByUpstream
	// blockedByCap means only capped callers' own caps left waiters of the
	// class waiting: the class itself has room for anyone else.
	blockedByCap
)

// takeResult is a Store's answer.
type takeResult struct {
	// Granted is how many admissions were granted per class, 0..Want.
	Granted PerClass
	// Blocker is, per class, why fewer than Want were granted.
	Blocker [classify.NumClasses]blocker
	// RetryAfter is when asking again can succeed for a blocked class: the
	// start of the next window, or a polling interval for the in-flight
	// bound. Zero when nothing is blocked.
	RetryAfter time.Duration
	// FleetInFlight is the in-flight count of every replica together, by
	// class, after this call (for a single-replica store, this replica's).
	FleetInFlight PerClass
	// UpstreamHold is how much longer bulk is held on the upstream's word;
	// 0 when it is not.
	UpstreamHold time.Duration
	// Window is the current second's use after this call.
	Window WindowUse
	// SecondLeft is what was left of the window's second when the store
	// decided, by the store's clock: grants are charged to that second.
	SecondLeft time.Duration
	// Caps answer takeRequest.Caps, position for position.
	Caps []capResult
}

// WindowUse is what each class has used of one second's allowance.
type WindowUse struct {
	// Sec is the window, in Unix seconds of the store's clock.
	Sec int64 `json:"second"`
	// Requests and Tokens are what each class used, by class.
	Requests PerClass `json:"requests"`
	Tokens   PerClass `json:"tokens"`
}

// upstreamState is what is known of the upstream's word on the account,
// in one clock: the freshest observation's time and the hold it announced
// (remaining below the reserve), and the end of the latest 429's retry
// hint. The replica keeps one of what it saw since its last store call, a
// store one of everything it heard, in its own clock. merge is the one
// rule; take.lua's upstream phase mirrors it, and the conformance suite
// holds the two equal. The zero value knows nothing.
type upstreamState struct {
	observedAt, holdUntil, throttleUntil time.Time
}

// merge adds an observation made at at that holds bulk for hold after it
// (0: the account is above the reserve, which lifts an older hold) and,
// by a 429, until throttleUntil (zero: none). The freshest observation's
// hold wins; a 429's hold is lifted by none but a later end.
func (u *upstreamState) merge(at time.Time, hold time.Duration, throttleUntil time.Time) {
	if at.After(u.observedAt) {
		u.observedAt, u.holdUntil = at, time.Time{}
		if hold > 0 {
			u.holdUntil = at.Add(hold)
		}
	}
	if throttleUntil.After(u.throttleUntil) {
		u.throttleUntil = throttleUntil
	}
}

// report is u as a report sent at now, in durations relative to it, so
// the store reads it on its own clock.
func (u *upstreamState) report(now time.Time) *upstreamReport {
	r := &upstreamReport{Age: max(0, now.Sub(u.observedAt)), ThrottleFor: max(0, u.throttleUntil.Sub(now))}
	if !u.holdUntil.IsZero() {
		r.Hold = u.holdUntil.Sub(u.observedAt)
	}
	return r
}

// apply merges a report received at now; a nil report changes nothing.
func (u *upstreamState) apply(r *upstreamReport, now time.Time) {
	if r == nil {
		return
	}
	var throttleUntil time.Time
	if r.ThrottleFor > 0 {
		throttleUntil = now.Add(r.ThrottleFor)
	}
	u.merge(now.Add(-r.Age), r.Hold, throttleUntil)
}

// hold is how much longer bulk is held at now.
func (u *upstreamState) hold(now time.Time) time.Duration {
	until := u.holdUntil
	if u.throttleUntil.After(until) {
		until = u.throttleUntil
	}
	return max(0, until.Sub(now))
}

// window is the state of one second: what each class has used of it, in
// requests and in tokens.
type window struct {
	sec    int64
	used   PerClass
	tokens PerClass
}

// grantAll applies the partition rules of DESIGN.md to one call, both
// classes, interactive first, and returns the grants. used and inFlight are
// updated in place; inFlight is the fleet's. borrow says bulk may borrow
// (it is on and no interactive request waits anywhere). caps are the
// capped callers' rooms, by takeRequest.Caps position. The Redis store's
// take.lua is the same procedure; the conformance suite holds them equal.
func grantAll(l Limits, sec int64, req takeRequest, bulkHeld bool, borrow func(interactiveShort bool) bool, win *window, inFlight *PerClass, caps []capRoom) (granted PerClass, blocker [classify.NumClasses]blocker) {
	const I, B = classify.Interactive, classify.Bulk
	want, used, tok := req.Want, &win.used, &win.tokens
	for c := range tok {
		tok[c] = max(0, tok[c]+req.Corrections[c])
	}
	tokensOn := l.AccountTPM > 0
	account := Allowance(sec, l.AccountRPM)
	tAccount := Allowance(sec, l.AccountTPM)
	granted[I], blocker[I] = grantInOrder(I, req.Waiters[I], want[I], account-used[I]-used[B], l.InFlight-inFlight[I]-inFlight[B],
		tokenRoom{on: tokensOn, room: tAccount - tok[I] - tok[B], used: &tok[I]}, caps)
	used[I] += granted[I]
	inFlight[I] += granted[I]
	// A waiter left for its own cap does not stop bulk borrowing: the
	// class had room for it.
	short := granted[I] < want[I] && blocker[I] != blockedByCap

	if bulkHeld {
		if want[B] > 0 {
			blocker[B] = blockedByUpstream
		}
		borrow(short) // interactive's standing is recorded all the same
		return granted, blocker
	}
	total, totalInFlight, totalTokens := used[I]+used[B], inFlight[I]+inFlight[B], tok[I]+tok[B]
	wroom := Allowance(sec, l.BulkRPM) - used[B]
	froom := l.BulkInFlight - inFlight[B]
	troom := Allowance(sec, l.BulkTPM) - tok[B]
	if l.Borrow && borrow(short) {
		wroom = max(wroom, account-Allowance(sec, l.ReserveRPM)-total)
		froom = max(froom, l.InFlight-l.ReserveInFlight-totalInFlight)
		troom = max(troom, tAccount-Allowance(sec, l.ReserveTPM)-totalTokens)
	}
	granted[B], blocker[B] = grantInOrder(B, req.Waiters[B], want[B], min(wroom, account-total), min(froom, l.InFlight-totalInFlight),
		tokenRoom{on: tokensOn, strict: true, room: min(troom, tAccount-totalTokens), used: &tok[B]}, caps)
	used[B] += granted[B]
	inFlight[B] += granted[B]
	return granted, blocker
}

// tokenRoom is one class's token room in a call, when tokens are
// enforced (on). Interactive is let through while any room is left: a
// second overshoots by at most one request. Bulk (strict) takes only what
// fits, so it never reaches into the reserve — except that its first
// request of a second goes if any room is left, so no request is too
// large to ever go. used is the class's tokens in the window.
type tokenRoom struct {
	on, strict bool
	room       int64
	used       *int64
}

// capRoom is what one capped caller may still take in a call: requests in
// its window and slots under its in-flight bound. res is where its answer
// goes.
type capRoom struct {
	window, inFlight int64
	res              *capResult
}

// newCapRoom is the room of a caller capped at b, with used requests in
// the window of second sec and fleet in flight, answering in res.
func newCapRoom(b capBounds, sec, used, fleet int64, res *capResult) capRoom {
	return capRoom{window: Allowance(sec, b.RequestsPerMinute) - used, inFlight: b.MaxInFlight - fleet, res: res}
}

func (r *capRoom) full() bool { return r.window <= 0 || r.inFlight <= 0 }

func (r *capRoom) take(c classify.Class) {
	r.window--
	r.inFlight--
	r.res.Granted[c]++
}

// grantInOrder grants class c's waiters in order while the class has room:
// wroom requests in the window, froom in flight and, when tokens are
// enforced, tk's tokens. A capped caller's waiter is passed over once its
// cap is full, and the next one goes. Without a list (ws nil, tokens not
// enforced) want uncapped requests are granted as the rooms allow. It
// says which room stopped it; blockedByCap when only caps did. This is
// the one place the order of grants is decided: the limiter lists its
// waiters in the order they are to go, and take.lua's grantInOrder mirrors
// this function.
func grantInOrder(c classify.Class, ws []queued, want, wroom, froom int64, tk tokenRoom, caps []capRoom) (int64, blocker) {
	var n int64
	stop := func() (int64, blocker) {
		if wroom <= n {
			return n, blockedByWindow
		}
		return n, blockedByInFlight
	}
	if ws == nil && !tk.on {
		n = max(0, min(want, wroom, froom))
		if n == want {
			return n, notBlocked
		}
		return stop()
	}
	first := tk.on && *tk.used == 0
	capped := false
	for _, w := range ws {
		if n >= min(wroom, froom) {
			return stop()
		}
		if w.Cap > 0 && caps[w.Cap-1].full() {
			caps[w.Cap-1].res.Full = true
			capped = true
			continue
		}
		if tk.on {
			if tk.room <= 0 || (tk.strict && w.Cost > tk.room && (!first || n > 0)) {
				return n, blockedByWindow // the next in line does not fit: later ones wait their turn
			}
			tk.room -= w.Cost
			*tk.used += w.Cost
		}
		n++
		if w.Cap > 0 {
			caps[w.Cap-1].take(c)
		}
	}
	if capped {
		return n, blockedByCap
	}
	return n, notBlocked
}

// retryAfter is when a call blocked as blocker may succeed, at now: the next
// window, inFlightPoll for an in-flight bound (the account's or a cap's) if
// that is sooner, or the end of the upstream hold.
func retryAfter(now time.Time, blocker [classify.NumClasses]blocker, inFlightPoll, upstreamHold time.Duration) time.Duration {
	var d time.Duration
	for _, b := range blocker {
		next := untilNextSecond(now)
		if (b == blockedByInFlight || b == blockedByCap) && inFlightPoll > 0 {
			next = min(next, inFlightPoll)
		}
		if b == blockedByUpstream {
			next = max(upstreamHold, time.Millisecond)
		}
		if b != notBlocked && (d == 0 || next < d) {
			d = next
		}
	}
	return d
}

func untilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}
