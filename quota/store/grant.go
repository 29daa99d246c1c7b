package store

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// Window is the state of one second: what each class has used of it, in
// requests and in tokens.
type Window struct {
	Sec    int64
	Used   PerClass
	Tokens PerClass
}

// next is the window of second sec after w. Token use past the
// allowance (one request may overshoot a second) is carried into the
// second that follows w as use, bulk's first, so the overshoot is paid
// for and a run of seconds charges no more than its allowance — up to one
// minute's allowance (tpm): whatever one request was charged or settled
// to, the seconds after it are spent for at most a minute (take.lua's
// readWindow alike). Nothing else carries: unused allowance and unspent
// credit are gone with w.
func (w Window) next(sec, tpm int64) Window {
	n := Window{Sec: sec}
	if sec != w.Sec+1 {
		return n
	}
	excess := w.Tokens[classify.Interactive] + w.Tokens[classify.Bulk] - Allowance(w.Sec, tpm)
	if excess = min(excess, tpm); excess > 0 {
		n.Tokens[classify.Bulk] = min(max(w.Tokens[classify.Bulk], 0), excess)
		n.Tokens[classify.Interactive] = excess - n.Tokens[classify.Bulk]
	}
	return n
}

// GrantAll applies the partition rules of docs/rules.md to one call, both
// classes, interactive first, and returns the grants. used and inFlight are
// updated in place; inFlight is the fleet's. held says a class gets
// nothing: bulk on the upstream's word or the output budget, interactive
// while the output budget is spent. borrow says bulk may borrow
// (it is on and no interactive request waits anywhere). The Redis store's
// take.lua is the same procedure; the conformance suite holds them equal.
func GrantAll(l Limits, sec int64, req TakeRequest, held [classify.NumClasses]bool, borrow func(interactiveShort bool) bool, win *Window, inFlight *PerClass) (granted PerClass, blocker [classify.NumClasses]Blocker) {
	const I, B = classify.Interactive, classify.Bulk
	want, used, tok := req.Want, &win.Used, &win.Tokens
	tokensOn := l.AccountTPM > 0
	tAccount := Allowance(sec, l.AccountTPM)
	for c := range tok {
		tok[c] = settleTokens(tok[c], req.Corrections[c], tAccount, l.AccountTPM)
	}
	if held[I] {
		if want[I] > 0 {
			blocker[I] = BlockedByOutput
		}
	} else {
		wroom, froom, troom := l.Room(I, sec, false, *used, *inFlight, *tok)
		granted[I], blocker[I] = grantInOrder(req.Waiters[I], want[I], wroom, froom, tokenRoom{on: tokensOn, room: troom, used: &tok[I]})
	}
	used[I] += granted[I]
	inFlight[I] += granted[I]
	short := granted[I] < want[I]

	if held[B] {
		if want[B] > 0 {
			blocker[B] = BlockedByUpstream
		}
		borrow(short) // interactive's standing is recorded all the same
		return granted, blocker
	}
	wroom, froom, troom := l.Room(B, sec, l.Borrow && borrow(short), *used, *inFlight, *tok)
	granted[B], blocker[B] = grantInOrder(req.Waiters[B], want[B], wroom, froom, tokenRoom{on: tokensOn, strict: true, room: troom, used: &tok[B]})
	used[B] += granted[B]
	inFlight[B] += granted[B]
	return granted, blocker
}

// Room is what class c may take in window sec beside what is used there
// — requests, in flight and tokens of both classes — as docs/rules.md's
// shares state it: interactive any capacity the second has left; bulk its
// share, or with borrow (Limits.Borrow, and no interactive request
// starved anywhere) all but the interactive reserve; never past the
// account. It is the one statement of the partition: GrantAll grants by
// it, limiter.busy guesses by it, and take.lua's grant mirrors it.
func (l Limits) Room(c classify.Class, sec int64, borrow bool, used, inFlight, tok PerClass) (wroom, froom, troom int64) {
	const I, B = classify.Interactive, classify.Bulk
	wroom = Allowance(sec, l.AccountRPM) - used[I] - used[B]
	froom = l.InFlight - inFlight[I] - inFlight[B]
	troom = Allowance(sec, l.AccountTPM) - tok[I] - tok[B]
	if c == I {
		return wroom, froom, troom
	}
	bw, bf, bt := Allowance(sec, l.BulkRPM)-used[B], l.BulkInFlight-inFlight[B], Allowance(sec, l.BulkTPM)-tok[B]
	if borrow {
		bw = max(bw, wroom-Allowance(sec, l.ReserveRPM))
		bf = max(bf, froom-l.ReserveInFlight)
		bt = max(bt, troom-Allowance(sec, l.ReserveTPM))
	}
	return min(bw, wroom), min(bf, froom), min(bt, troom)
}

// settleTokens is a class's token use in the window after correction
// (real usage minus the estimates charged, for requests that ended since
// the last call) is added to used, with tAccount the window's account
// allowance and tpm the minute's. A charge settled down is room in this
// window, even below zero — credit carried into the second the response
// ended in, where the next requests spend it — but never more than one
// second's allowance, so a burst of short answers cannot open a flood.
// Clamping at zero lost it: at estimates of 36 for answers of 22, a
// second's 100 tokens carried only 66 to the upstream. Settled up, the
// use is bounded by the second's allowance and a minute's: past that the
// carry (window.next) is a minute's all the same.
func settleTokens(used, correction, tAccount, tpm int64) int64 {
	return min(max(-tAccount, used+correction), tAccount+tpm)
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

// grantInOrder grants class c's waiters in order while the class has room:
// wroom requests in the window, froom in flight and, when tokens are
// enforced, tk's tokens. Without a list (ws nil, tokens not enforced)
// want requests are granted as the rooms allow. It says which room
// stopped it. This is
// the one place the order of grants is decided: the limiter lists its
// waiters in the order they are to go, and take.lua's grantInOrder mirrors
// this function.
func grantInOrder(ws []Queued, want, wroom, froom int64, tk tokenRoom) (int64, Blocker) {
	var n int64
	stop := func() (int64, Blocker) {
		if wroom <= n {
			return n, BlockedByWindow
		}
		return n, BlockedByInFlight
	}
	if ws == nil && !tk.on {
		n = max(0, min(want, wroom, froom))
		if n == want {
			return n, NotBlocked
		}
		return stop()
	}
	first := tk.on && *tk.used <= 0
	for _, w := range ws {
		if n >= min(wroom, froom) {
			return stop()
		}
		if tk.on {
			if tk.room <= 0 || (tk.strict && w.Cost > tk.room && (!first || n > 0)) {
				return n, BlockedByWindow // the next in line does not fit: later ones wait their turn
			}
			tk.room -= w.Cost
			*tk.used += w.Cost
		}
		n++
	}
	return n, NotBlocked
}

// retryAfter is when a call blocked as blocker may succeed, at now: the next
// window, inFlightPoll for the in-flight bound if
// that is sooner, the end of the upstream hold, or outputWait for a spent
// output budget.
func retryAfter(now time.Time, blocker [classify.NumClasses]Blocker, inFlightPoll, upstreamHold, outputWait time.Duration) time.Duration {
	var d time.Duration
	for _, b := range blocker {
		next := UntilNextSecond(now)
		if b == BlockedByInFlight && inFlightPoll > 0 {
			next = min(next, inFlightPoll)
		}
		switch b {
		case BlockedByUpstream:
			next = max(upstreamHold, time.Millisecond)
		case BlockedByOutput:
			next = max(outputWait, time.Millisecond)
		}
		if b != NotBlocked && (d == 0 || next < d) {
			d = next
		}
	}
	return d
}

// UntilNextSecond is what is left of now's second.
func UntilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}
