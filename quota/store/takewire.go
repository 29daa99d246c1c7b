package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// takeArgs is take.lua's one argument, ARGV[1] as JSON: the script reads
// each field by its json tag (a.want, a.limits.account_rpm), so the names
// are written here once. Per-class pairs are JSON arrays, interactive
// first, which the script indexes by class as Lua counts (1, 2).
type takeArgs struct {
	// Replica is this replica's id (Redis.replica).
	Replica string `json:"replica"`
	// Want, InFlight, Credits and Corrections are TakeRequest's, by class.
	Want        PerClass `json:"want"`
	InFlight    PerClass `json:"in_flight"`
	Credits     PerClass `json:"credits"`
	Corrections PerClass `json:"corrections"`
	// Waiters are, by class, the listed waiters' token estimates in the
	// order grants go to them. Never null: cjson decodes null as a value
	// of its own, not as an empty list. Both empty with tokens not
	// enforced means Want alone counts the waiters.
	Waiters [classify.NumClasses][]int64 `json:"waiters"`
	// OutputSpent is TakeRequest.Output: output tokens reported since the
	// last call.
	OutputSpent int64 `json:"output_spent"`
	// Upstream is TakeRequest.Upstream in milliseconds; absent when nil.
	Upstream *takeUpstream `json:"upstream,omitempty"`
	// Limits are the call's limits; the script's names for them are
	// Limits's json tags.
	Limits Limits `json:"limits"`
	// TTLMs is how long a silent replica keeps its slots (ms).
	TTLMs int64 `json:"ttl_ms"`
	// ClockMs replaces Redis TIME (Unix ms) when not 0: tests only.
	ClockMs int64 `json:"clock_ms"`
	// PollMs is the retry hint (ms) when only the in-flight bound blocks.
	PollMs int64 `json:"poll_ms"`
}

// takeUpstream is UpstreamReport as take.lua reads it, in milliseconds.
type takeUpstream struct {
	AgeMs      int64 `json:"age_ms"`
	HoldMs     int64 `json:"hold_ms"`
	ThrottleMs int64 `json:"throttle_ms"`
}

// newTakeArgs encodes req for take.lua, on behalf of replica s.
func (s *Redis) newTakeArgs(req TakeRequest) takeArgs {
	a := takeArgs{Replica: s.replica, Want: req.Want, InFlight: req.InFlight, Credits: req.Credits,
		Corrections: req.Corrections, OutputSpent: req.Output, Limits: req.Limits,
		TTLMs: s.replicaTTL.Milliseconds(), PollMs: s.inFlightPoll.Milliseconds()}
	for c, ws := range req.Waiters {
		costs := make([]int64, len(ws))
		for i, w := range ws {
			costs[i] = w.Cost
		}
		a.Waiters[c] = costs
	}
	if u := req.Upstream; u != nil {
		a.Upstream = &takeUpstream{AgeMs: u.Age.Milliseconds(), HoldMs: u.Hold.Milliseconds(), ThrottleMs: u.ThrottleFor.Milliseconds()}
	}
	if s.clock != nil {
		a.ClockMs = s.clock().UnixMilli()
	}
	return a
}

// takeReply is take.lua's reply, one JSON object; the script writes each
// field under its json tag.
type takeReply struct {
	// Granted, Blocker, Fleet, Credits, Used and Tokens are by class:
	// what was granted; what stopped the class (store.go's blocker, the
	// script's BLOCKER); the slots taken across the fleet, credits
	// included, and of them the credits (so Fleet − Credits is requests
	// genuinely in flight); the window's use in requests and in tokens
	// after the call.
	Granted luaPair `json:"granted"`
	Blocker luaPair `json:"blocker"`
	Fleet   luaPair `json:"fleet"`
	Credits luaPair `json:"credits"`
	Used    luaPair `json:"used"`
	Tokens  luaPair `json:"tokens"`
	// Sec is the window's second (Unix seconds of Redis's clock).
	Sec luaInt `json:"sec"`
	// RetryMs is when asking again can succeed (0: nothing blocked).
	RetryMs luaInt `json:"retry_ms"`
	// HoldMs is how much longer bulk is held, on the upstream's word or by
	// the output budget (TakeResult.UpstreamHold).
	HoldMs luaInt `json:"hold_ms"`
	// LeftMs is what was left of the window's second by Redis's clock,
	// floored to a millisecond.
	LeftMs luaInt `json:"left_ms"`
}

// parseTakeReply reads take.lua's reply. A name the script writes that
// takeReply does not know is an error, and TestTakeReplyNames catches one
// it leaves out, so a misspelt name fails rather than reading as zero.
func parseTakeReply(out string) (TakeResult, error) {
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	var r takeReply
	if err := d.Decode(&r); err != nil {
		return TakeResult{}, err
	}
	return r.result()
}

// result is the reply as the store contract has it, its shape checked.
func (r takeReply) result() (TakeResult, error) {
	res := TakeResult{Granted: r.Granted.perClass(), FleetInFlight: r.Fleet.perClass(), FleetCredits: r.Credits.perClass(),
		Window:       WindowUse{Sec: int64(r.Sec), Requests: r.Used.perClass(), Tokens: r.Tokens.perClass()},
		RetryAfter:   time.Duration(r.RetryMs) * time.Millisecond,
		UpstreamHold: time.Duration(r.HoldMs) * time.Millisecond,
		// Milliseconds are floored, so the second may end up to 1 ms sooner.
		SecondLeft: max(0, time.Duration(r.LeftMs-1)*time.Millisecond),
	}
	for c, v := range r.Blocker {
		if v < 0 || v > luaInt(BlockedByOutput) {
			return TakeResult{}, fmt.Errorf("blocker %d out of range", v)
		}
		res.Blocker[c] = Blocker(v)
	}
	return res, nil
}

// luaInt is an integer take.lua sends as a decimal string: cjson writes
// numbers with 14 significant digits (10^14 as 1e+14), and token counts
// may be longer, so the script formats each with %d instead.
type luaInt int64

// errNotLuaInt is the cause of a reply value that is not a quoted integer.
var errNotLuaInt = errors.New("want an integer as a string")

// UnmarshalJSON implements json.Unmarshaler.
func (n *luaInt) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("%s: %w", b, errNotLuaInt)
	}
	v, err := strconv.ParseInt(string(b[1:len(b)-1]), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", b, errNotLuaInt)
	}
	*n = luaInt(v)
	return nil
}

// luaPair is a per-class pair of luaInts, interactive first.
type luaPair [classify.NumClasses]luaInt

func (p luaPair) perClass() PerClass {
	var pc PerClass
	for c, v := range p {
		pc[c] = int64(v)
	}
	return pc
}
