package proxy

import (
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/quota"
)

// State is what /admin/state reports: the live numbers behind every
// decision.
type State struct {
	// ConfigVersion identifies the configuration in force.
	ConfigVersion string `json:"config_version"`
	// Store is the quota store's kind and health.
	Store StoreState `json:"store"`
	// Window is the current second's use, by class (index 0 interactive).
	Window quota.WindowUse `json:"window"`
	// InFlight, FleetInFlight and Queued are by class name.
	InFlight      map[string]int64 `json:"in_flight"`
	FleetInFlight map[string]int64 `json:"fleet_in_flight"`
	Queued        map[string]int   `json:"queued"`
	// UpstreamHoldSeconds is how much longer bulk is held on the upstream's word.
	UpstreamHoldSeconds float64 `json:"upstream_hold_seconds"`
	// Upstream is the provider's last reported account state.
	Upstream *UpstreamState `json:"upstream,omitempty"`
	// Caps are the capped callers' numbers, by caller name.
	Caps map[string]quota.CapState `json:"caps"`
}

// StoreState is the store part of State.
type StoreState struct {
	Mode     string `json:"mode"` // in-process or redis
	Degraded bool   `json:"degraded"`
}

// UpstreamState is the provider's last report, as parsed.
type UpstreamState struct {
	ObservedAt time.Time    `json:"observed_at"`
	Requests   WindowReport `json:"requests"`
	Tokens     WindowReport `json:"tokens"`
	RetryAfter float64      `json:"retry_after_seconds,omitempty"`
	Status     int          `json:"status"`
}

// WindowReport is one dimension of a report; -1 means unknown.
type WindowReport struct {
	Limit        int64   `json:"limit"`
	Remaining    int64   `json:"remaining"`
	ResetSeconds float64 `json:"reset_seconds"`
}

func windowReport(w ratelimit.Window) WindowReport {
	r := WindowReport{Limit: w.Limit, Remaining: w.Remaining, ResetSeconds: -1}
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
	u := &UpstreamState{ObservedAt: at, Requests: windowReport(o.Requests), Tokens: windowReport(o.Tokens), Status: status}
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
	st := State{
		ConfigVersion:       h.live.Load().ConfigVersion,
		Store:               StoreState{Mode: storeMode(h.admitter), Degraded: h.admitter.Degraded()},
		Window:              h.admitter.Window(),
		InFlight:            map[string]int64{},
		FleetInFlight:       map[string]int64{},
		Queued:              map[string]int{},
		UpstreamHoldSeconds: h.admitter.UpstreamHold().Seconds(),
		Upstream:            h.last.get(),
		Caps:                h.admitter.Caps(),
	}
	for _, c := range classify.Classes {
		st.InFlight[c.String()] = h.admitter.InFlight(c)
		st.FleetInFlight[c.String()] = h.admitter.FleetInFlight(c)
		st.Queued[c.String()] = h.admitter.Queued(c)
	}
	return st
}

// storeMode names the admitter's store for /admin/state.
func storeMode(a *quota.Admitter) string {
	if a.Shared() {
		return "redis"
	}
	return "in-process"
}
