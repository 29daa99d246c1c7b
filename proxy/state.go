package proxy

import (
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/quota"
)

// State is what /admin/state reports: the live numbers behind every
// decision. Admission's (store, window, in flight, queues, hold, caps) are
// quota's State, inline.
type State struct {
	// ConfigVersion identifies the configuration in force.
	ConfigVersion string `json:"config_version"`
	quota.State
	// Upstream is the provider's last reported account state.
	Upstream *UpstreamState `json:"upstream,omitempty"`
}

// UpstreamState is the provider's last report, as parsed.
type UpstreamState struct {
	ObservedAt time.Time    `json:"observed_at"`
	Requests   BucketReport `json:"requests"`
	Tokens     BucketReport `json:"tokens"`
	RetryAfter float64      `json:"retry_after_seconds,omitempty"`
	Status     int          `json:"status"`
}

// BucketReport is one dimension of a report; -1 means unknown.
type BucketReport struct {
	Limit        int64   `json:"limit"`
	Remaining    int64   `json:"remaining"`
	ResetSeconds float64 `json:"reset_seconds"`
}

func bucketReport(w ratelimit.Bucket) BucketReport {
	r := BucketReport{Limit: w.Limit, Remaining: w.Remaining, ResetSeconds: -1}
	if w.Reset >= 0 {
		r.ResetSeconds = w.Reset.Seconds()
	}
	return r
}

// lastReport keeps the provider's last report that said anything known.
type lastReport struct {
	mu sync.Mutex
	u  *UpstreamState
}

func (l *lastReport) set(o ratelimit.Observation, status int, at time.Time) {
	u := &UpstreamState{ObservedAt: at, Requests: bucketReport(o.Requests), Tokens: bucketReport(o.Tokens), Status: status}
	if o.RetryAfter > 0 {
		u.RetryAfter = o.RetryAfter.Seconds()
	}
	l.mu.Lock()
	l.u = u
	l.mu.Unlock()
}

func (l *lastReport) get() *UpstreamState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.u
}

// State returns the live numbers for /admin/state. Safe for concurrent use.
func (h *Handler) State() State {
	return State{ConfigVersion: h.live.Load().ConfigVersion, State: h.admitter.State(), Upstream: h.last.get()}
}
