package quota

import (
	"math"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota/adaptive"
)

// checkAllowance checks an account's or a pool's numbers, under key.
func checkAllowance(bad func(string, string, ...any), key string, rpm, tpm, otpm, maxInFlight, replicas int64) {
	if rpm <= 0 {
		bad(key+".requests_per_minute", "must be > 0 (or unset with adaptive_in_flight: no request limit), got %d", rpm)
	}
	if tpm < 0 {
		bad(key+".tokens_per_minute", "must be >= 0 (0 = not enforced), got %d", tpm)
	}
	if otpm < 0 || otpm > maxOutputTPM {
		bad(key+".output_tokens_per_minute", "must be between 0 (not enforced) and %d, got %d", maxOutputTPM, otpm)
	}
	if maxInFlight <= 0 {
		bad(key+".max_in_flight", "must be > 0, got %d", maxInFlight)
	} else if replicas >= 1 && maxInFlight < replicas {
		bad(key+".max_in_flight", "must be >= %s (%d) so every replica may send, got %d", configcheck.Ref("account.expected_replicas"), replicas, maxInFlight)
	}
}

// checkMaxCharge checks an account's or a pool's max_request_tokens,
// under key, against its tokens_per_minute tpm: a charge above a minute's
// allowance could not be carried in full (window.next), and the providers
// refuse such a request themselves.
func checkMaxCharge(bad func(string, string, ...any), key string, most, tpm int64) {
	switch {
	case most < 0:
		bad(key+".max_request_tokens", "must be >= 0 (0 = %s), got %d", configcheck.Ref(key+".tokens_per_minute"), most)
	case tpm > 0 && most > tpm:
		bad(key+".max_request_tokens", "must be <= %s (%d), a minute's allowance, got %d", configcheck.Ref(key+".tokens_per_minute"), tpm, most)
	}
}

// checkMinInFlight checks an account's or a pool's min_in_flight, under
// key: the adaptive bound's floor, at most its ceiling.
func checkMinInFlight(bad func(string, string, ...any), key string, floor, ceiling int64) {
	switch {
	case floor < 0:
		bad(key+".min_in_flight", "must be >= 0 (0 = %d), got %d", adaptive.DefaultMinInFlight, floor)
	case ceiling > 0 && floor > ceiling:
		bad(key+".min_in_flight", "must be <= %s (%d), got %d", configcheck.Ref(key+".max_in_flight"), ceiling, floor)
	}
}

func checkFraction(bad func(string, string, ...any), key string, v float64) {
	if math.IsNaN(v) || v < 0 || v > 1 {
		bad(key, "must be between 0 and 1, got %g", v)
	}
}

func checkWait(bad func(string, string, ...any), prefix string, wait time.Duration, queue int) {
	if wait <= 0 {
		bad(prefix+".max_wait", "must be > 0, got %s", wait)
	}
	if queue < 1 {
		bad(prefix+".max_queue", "must be >= 1, got %d", queue)
	}
}
