package proxy

import (
	"slices"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/quota"
)

// State is what /admin/state reports: the live numbers behind every
// decision. Admission's (store, window, in flight, queues, hold, caps) are
// quota's State, inline.
type State struct {
	// ConfigVersion identifies the configuration in force, whole: two
	// replicas that differ only in their listen addresses differ here.
	ConfigVersion string `json:"config_version"`
	// ConfigHash identifies what the fleet must agree on (Live.ConfigHash):
	// equal on every replica of a fleet that runs one configuration.
	ConfigHash string `json:"config_hash"`
	// Mode is shadow or enforce.
	Mode string `json:"mode"`
	quota.State
	// Upstream is the provider's last report, of any pool's model.
	Upstream *UpstreamState `json:"upstream,omitempty"`
	// UpstreamPools are the provider's last report of each pool's model,
	// by pool.
	UpstreamPools map[string]*UpstreamState `json:"upstream_pools,omitempty"`
}

// UpstreamState is the provider's last report, as parsed.
type UpstreamState struct {
	// Pool is the pool whose model the report was about.
	Pool       string       `json:"pool"`
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

// lastReport keeps the provider's last report that said anything known,
// of any pool and of each, by its labels.
type lastReport struct {
	mu     sync.Mutex
	u      *UpstreamState
	byPool map[quota.Labels]*UpstreamState
}

// set records o, a report on the model of the pool labelled pool, named
// name in /admin/state (quota.StateName).
func (l *lastReport) set(pool quota.Labels, name string, o ratelimit.Observation, status int, at time.Time) {
	u := &UpstreamState{Pool: name, ObservedAt: at, Requests: bucketReport(o.Requests), Tokens: bucketReport(o.Tokens), Status: status}
	if o.RetryAfter > 0 {
		u.RetryAfter = o.RetryAfter.Seconds()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.u = u
	if l.byPool == nil {
		l.byPool = map[quota.Labels]*UpstreamState{}
	}
	l.byPool[pool] = u
}

// keep forgets the reports of pools not in pools (removed by a reload),
// so the map stays bounded by the configuration.
func (l *lastReport) keep(pools []quota.Labels) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.byPool {
		if !slices.Contains(pools, p) {
			delete(l.byPool, p)
		}
	}
}

// get is the last report of any pool, and the last of each by its name.
func (l *lastReport) get() (*UpstreamState, map[string]*UpstreamState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byName := make(map[string]*UpstreamState, len(l.byPool))
	for _, u := range l.byPool {
		byName[u.Pool] = u
	}
	return l.u, byName
}
