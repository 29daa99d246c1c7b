package ratelimit

import (
	"net/http"
	"testing"
	"time"
)

// receipt is the fixed receipt time most tests parse against.
var receipt = time.Date(2025, 8, 21, 12, 40, 0, 0, time.UTC)

// header builds an http.Header from name, value pairs through Header.Add,
// which canonicalises names the way net/http does for real responses; the
// lower-case spellings below therefore also check the package's
// precomputed canonical names.
func header(kv ...string) http.Header {
	if len(kv)%2 != 0 {
		panic("header: odd number of arguments")
	}
	h := http.Header{}
	for i := 1; i < len(kv); i += 2 {
		h.Add(kv[i-1], kv[i])
	}
	return h
}

// win is a terse Bucket literal for tables.
func win(limit, remaining int64, reset time.Duration) Bucket {
	return Bucket{Limit: limit, Remaining: remaining, Reset: reset}
}

// checkBucket fails t unless every field of w is unknown or in range, and a
// window with neither count is entirely unknown.
func checkBucket(t *testing.T, name string, w Bucket) {
	t.Helper()
	if w.Limit != -1 && w.Limit <= 0 {
		t.Errorf("%s: Limit %d is neither -1 nor positive", name, w.Limit)
	}
	if w.Remaining < -1 {
		t.Errorf("%s: Remaining %d is below -1", name, w.Remaining)
	}
	if w.Reset != -1 && (w.Reset < 0 || w.Reset > MaxDuration) {
		t.Errorf("%s: Reset %v is neither -1 nor in [0, %v]", name, w.Reset, MaxDuration)
	}
	if !w.reported() && w != unknownBucket() {
		t.Errorf("%s: %+v has no count but is not entirely unknown", name, w)
	}
	if w.Known() && (w.Limit <= 0 || w.Remaining < 0) {
		t.Errorf("%s: %+v is Known with an unknown count", name, w)
	}
}

// checkObservation applies checkBucket to every dimension of o and bounds
// its retry hint.
func checkObservation(t *testing.T, o Observation) {
	t.Helper()
	checkBucket(t, "Requests", o.Requests)
	checkBucket(t, "Tokens", o.Tokens)
	checkBucket(t, "InputTokens", o.InputTokens)
	checkBucket(t, "OutputTokens", o.OutputTokens)
	if o.RetryAfter != -1 && (o.RetryAfter < 0 || o.RetryAfter > MaxDuration) {
		t.Errorf("RetryAfter %v is neither -1 nor in [0, %v]", o.RetryAfter, MaxDuration)
	}
}
