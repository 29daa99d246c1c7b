package store

import (
	"context"
	_ "embed" // the Lua script
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed adapt.lua
var adaptLua string

// AdaptScript runs through EVALSHA, falling back to EVAL on NOSCRIPT.
var AdaptScript = redis.NewScript(adaptLua)

var _ AdaptStore = (*RedisAdapt)(nil)

// RedisAdapt is the AdaptStore a fleet shares: each pool's bound, its
// counts and its lease live in one Redis hash under the pool's hash tag
// (AdaptKey), and each call is one adapt.lua call. The lease and the steps
// follow Redis TIME.
type RedisAdapt struct {
	client  redis.Scripter
	prefix  string
	replica string
	timeout time.Duration
	// interval and lease are adaptStepGap and AdaptLeaseTTL.
	interval, lease time.Duration
	// clock, when set (tests only), replaces Redis TIME.
	Clock func() time.Time
}

// NewRedisAdapt returns a store on client under cfg's key_prefix,
// calls bounded by its timeout, on behalf of replica.
func NewRedisAdapt(client redis.Scripter, cfg Config, replica string) *RedisAdapt {
	return &RedisAdapt{client: client, prefix: cfg.KeyPrefix, replica: replica, timeout: cfg.Timeout,
		interval: adaptStepGap, lease: AdaptLeaseTTL}
}

// AdaptKey is pool's adaptive-bound hash under prefix, in its hash tag.
func AdaptKey(prefix, pool string) string { return PoolTag(prefix, pool) + ":adapt" }

// adaptArgs is adapt.lua's one argument. Counts go as decimal strings, so
// that cjson's 14 significant digits never round them.
type adaptArgs struct {
	Op      string `json:"op"`
	Replica string `json:"replica"`
	Seq     uint64 `json:"seq,string"`
	// adaptArgCounts are an add's counts, embedded: the script reads them
	// beside the rest (a.completed), not as an object of their own.
	adaptArgCounts
	IntervalMs int64  `json:"interval_ms"`
	LeaseMs    int64  `json:"lease_ms"`
	View       string `json:"view,omitempty"`
	ClockMs    int64  `json:"clock_ms"`
}

// adaptArgCounts are AdaptCounts as adapt.lua reads them, durations in
// microseconds.
type adaptArgCounts struct {
	Completed int64 `json:"completed,string"`
	Work      int64 `json:"work,string"`
	LatencyUs int64 `json:"latency_us,string"`
	Failures  int64 `json:"failures,string"`
	Throttled int64 `json:"throttled,string"`
	BusyUs    int64 `json:"busy_us,string"`
	Saturated bool  `json:"saturated"`
}

// adaptReply is adapt.lua's reply.
type adaptReply struct {
	View      string `json:"view"`
	Step      bool   `json:"step"`
	Completed luaInt `json:"completed"`
	Work      luaInt `json:"work"`
	LatencyUs luaInt `json:"latency_us"`
	Failures  luaInt `json:"failures"`
	Throttled luaInt `json:"throttled"`
	BusyUs    luaInt `json:"busy_us"`
	Saturated bool   `json:"saturated"`
	ElapsedMs luaInt `json:"elapsed_ms"`
	Committed bool   `json:"committed"`
}

// Add implements AdaptStore.
func (s *RedisAdapt) Add(ctx context.Context, pool string, c AdaptCounts) (AdaptAnswer, error) {
	r, err := s.call(ctx, pool, adaptArgs{Op: "add", Seq: c.Seq, adaptArgCounts: adaptArgCounts{Completed: c.Completed, Work: c.Work,
		LatencyUs: c.Latency.Microseconds(), Failures: c.Failures, Throttled: c.Throttled, BusyUs: c.Busy.Microseconds(),
		Saturated: c.Saturated}})
	if err != nil {
		return AdaptAnswer{}, err
	}
	ans := AdaptAnswer{Step: r.Step, Elapsed: time.Duration(r.ElapsedMs) * time.Millisecond,
		Sample: AdaptCounts{Completed: int64(r.Completed), Work: int64(r.Work), Latency: time.Duration(r.LatencyUs) * time.Microsecond,
			Failures: int64(r.Failures), Throttled: int64(r.Throttled), Busy: time.Duration(r.BusyUs) * time.Microsecond, Saturated: r.Saturated}}
	if r.View != "" {
		if err := json.Unmarshal([]byte(r.View), &ans.View); err != nil {
			return AdaptAnswer{}, fmt.Errorf("quota: redis adapt: stored view: %w", err)
		}
	}
	if ans.Elapsed < 0 || ans.Sample.Completed < 0 || ans.Sample.Latency < 0 || ans.View.State.Bound < 0 {
		return AdaptAnswer{}, fmt.Errorf("quota: redis adapt: reply %+v out of range", r)
	}
	return ans, nil
}

// Commit implements AdaptStore.
func (s *RedisAdapt) Commit(ctx context.Context, pool string, v AdaptView) (bool, error) {
	view, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("quota: redis adapt: %w", err)
	}
	r, err := s.call(ctx, pool, adaptArgs{Op: "commit", View: string(view)})
	return r.Committed, err
}

// call runs adapt.lua once with a, on behalf of this replica.
func (s *RedisAdapt) call(ctx context.Context, pool string, a adaptArgs) (adaptReply, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, ErrTimeout)
	defer cancel()
	a.Replica, a.IntervalMs, a.LeaseMs = s.replica, s.interval.Milliseconds(), s.lease.Milliseconds()
	if s.Clock != nil {
		a.ClockMs = s.Clock().UnixMilli()
	}
	arg, err := json.Marshal(a)
	if err != nil {
		return adaptReply{}, fmt.Errorf("quota: redis adapt: %w", err)
	}
	key := AdaptKey(s.prefix, pool)
	out, err := AdaptScript.Run(ctx, s.client, []string{key, key + ":seq:" + s.replica}, arg).Text()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return adaptReply{}, fmt.Errorf("quota: redis adapt: %w", err)
	}
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	var r adaptReply
	if err := d.Decode(&r); err != nil {
		return adaptReply{}, fmt.Errorf("quota: redis adapt: reply: %w", err)
	}
	return r, nil
}
