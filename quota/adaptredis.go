package quota

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

// adaptScript runs through EVALSHA, falling back to EVAL on NOSCRIPT.
var adaptScript = redis.NewScript(adaptLua)

var _ adaptStore = (*redisAdaptStore)(nil)

// redisAdaptStore is the adaptStore a fleet shares: each pool's bound, its
// counts and its lease live in one Redis hash under the pool's hash tag
// (adaptKey), and each call is one adapt.lua call. The lease and the steps
// follow Redis TIME.
type redisAdaptStore struct {
	client  redis.Scripter
	prefix  string
	replica string
	timeout time.Duration
	// interval and lease are adaptStepGap and adaptLeaseTTL.
	interval, lease time.Duration
	// clock, when set (tests only), replaces Redis TIME.
	clock func() time.Time
}

// newRedisAdaptStore returns a store on client under cfg's key_prefix,
// calls bounded by its timeout, on behalf of replica.
func newRedisAdaptStore(client redis.Scripter, cfg StoreConfig, replica string) *redisAdaptStore {
	return &redisAdaptStore{client: client, prefix: cfg.KeyPrefix, replica: replica, timeout: cfg.Timeout,
		interval: adaptStepGap, lease: adaptLeaseTTL}
}

// adaptKey is pool's adaptive-bound hash under prefix, in its hash tag.
func adaptKey(prefix, pool string) string { return poolTag(prefix, pool) + ":adapt" }

// adaptArgs is adapt.lua's one argument. Counts go as decimal strings, so
// that cjson's 14 significant digits never round them.
type adaptArgs struct {
	Op         string `json:"op"`
	Replica    string `json:"replica"`
	Seq        uint64 `json:"seq,string"`
	Completed  int64  `json:"completed,string"`
	Work       int64  `json:"work,string"`
	LatencyUs  int64  `json:"latency_us,string"`
	Failures   int64  `json:"failures,string"`
	Throttled  int64  `json:"throttled,string"`
	BusyUs     int64  `json:"busy_us,string"`
	Saturated  bool   `json:"saturated"`
	IntervalMs int64  `json:"interval_ms"`
	LeaseMs    int64  `json:"lease_ms"`
	View       string `json:"view,omitempty"`
	ClockMs    int64  `json:"clock_ms"`
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

// add implements adaptStore.
func (s *redisAdaptStore) add(ctx context.Context, pool string, c adaptCounts) (adaptAnswer, error) {
	r, err := s.call(ctx, pool, adaptArgs{Op: "add", Seq: c.Seq, Completed: c.Completed, Work: c.Work, LatencyUs: c.Latency.Microseconds(),
		Failures: c.Failures, Throttled: c.Throttled, BusyUs: c.Busy.Microseconds(), Saturated: c.Saturated})
	if err != nil {
		return adaptAnswer{}, err
	}
	ans := adaptAnswer{Step: r.Step, Elapsed: time.Duration(r.ElapsedMs) * time.Millisecond,
		Sample: adaptCounts{Completed: int64(r.Completed), Work: int64(r.Work), Latency: time.Duration(r.LatencyUs) * time.Microsecond,
			Failures: int64(r.Failures), Throttled: int64(r.Throttled), Busy: time.Duration(r.BusyUs) * time.Microsecond, Saturated: r.Saturated}}
	if r.View != "" {
		if err := json.Unmarshal([]byte(r.View), &ans.View); err != nil {
			return adaptAnswer{}, fmt.Errorf("quota: redis adapt: stored view: %w", err)
		}
	}
	if ans.Elapsed < 0 || ans.Sample.Completed < 0 || ans.Sample.Latency < 0 || ans.View.State.Bound < 0 {
		return adaptAnswer{}, fmt.Errorf("quota: redis adapt: reply %+v out of range", r)
	}
	return ans, nil
}

// commit implements adaptStore.
func (s *redisAdaptStore) commit(ctx context.Context, pool string, v adaptView) (bool, error) {
	view, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("quota: redis adapt: %w", err)
	}
	r, err := s.call(ctx, pool, adaptArgs{Op: "commit", View: string(view)})
	return r.Committed, err
}

// call runs adapt.lua once with a, on behalf of this replica.
func (s *redisAdaptStore) call(ctx context.Context, pool string, a adaptArgs) (adaptReply, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errStoreTimeout)
	defer cancel()
	a.Replica, a.IntervalMs, a.LeaseMs = s.replica, s.interval.Milliseconds(), s.lease.Milliseconds()
	if s.clock != nil {
		a.ClockMs = s.clock().UnixMilli()
	}
	arg, err := json.Marshal(a)
	if err != nil {
		return adaptReply{}, fmt.Errorf("quota: redis adapt: %w", err)
	}
	key := adaptKey(s.prefix, pool)
	out, err := adaptScript.Run(ctx, s.client, []string{key, key + ":seq:" + s.replica}, arg).Text()
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
