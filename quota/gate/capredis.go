package gate

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua script
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/quota/store"
)

//go:embed cap.lua
var capLua string

// CapScript runs through EVALSHA, falling back to EVAL on NOSCRIPT.
var CapScript = redis.NewScript(store.AllowanceLua + capLua)

var _ CapCounter = (*RedisCapCounter)(nil)

// RedisCapCounter is the CapCounter a fleet shares: each capped caller's
// window and in-flight counts live in Redis under keys of its own
// (capKeys), and each take is one cap.lua call. Windows follow Redis
// TIME; a replica's count carries a heartbeat and stops counting when it
// stops calling.
type RedisCapCounter struct {
	client  redis.Scripter
	prefix  string
	replica string
	// replicaTTL is how long a silent replica keeps its slots.
	replicaTTL time.Duration
	timeout    time.Duration
	// poll is how soon to ask again when only the in-flight bound blocks:
	// slots freed by other replicas send no signal here.
	poll time.Duration
	// clock, when set (tests only), replaces Redis TIME.
	clock func() time.Time
}

// NewRedisCapCounter returns a counter on client under cfg's key_prefix,
// with calls bounded by its timeout and a replica's slots expiring after
// three heartbeats without a call; replica names this replica.
func NewRedisCapCounter(client redis.Scripter, cfg store.Config, replica string) *RedisCapCounter {
	if replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		replica = hex.EncodeToString(b[:])
	}
	return &RedisCapCounter{client: client, prefix: cfg.KeyPrefix, replica: replica,
		replicaTTL: 3 * cfg.Heartbeat, timeout: cfg.Timeout, poll: 25 * time.Millisecond}
}

// capKeys are caller's Redis keys under prefix, in cap.lua's KEYS order,
// all under the hash tag {prefix:cap:<caller>}: one slot per caller.
func capKeys(prefix, caller string) []string {
	tag := "{" + prefix + ":cap:" + caller + "}"
	return []string{tag + ":window", tag + ":inflight", tag + ":heartbeat"}
}

// capArgs is cap.lua's one argument.
type capArgs struct {
	Replica           string `json:"replica"`
	Want              int64  `json:"want"`
	InFlight          int64  `json:"in_flight"`
	MaxInFlight       int64  `json:"max_in_flight"`
	RequestsPerMinute int64  `json:"requests_per_minute"`
	TTLMs             int64  `json:"ttl_ms"`
	ClockMs           int64  `json:"clock_ms"`
	PollMs            int64  `json:"poll_ms"`
}

// capReply is cap.lua's reply.
type capReply struct {
	Granted int64 `json:"granted"`
	Fleet   int64 `json:"fleet"`
	Sec     int64 `json:"sec"`
	RetryMs int64 `json:"retry_ms"`
}

// take implements CapCounter with one script call.
func (s *RedisCapCounter) take(ctx context.Context, t capTake) (capAnswer, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, store.ErrTimeout)
	defer cancel()
	args := capArgs{Replica: s.replica, Want: t.Want, InFlight: t.InFlight,
		MaxInFlight: t.Cap.MaxInFlight, RequestsPerMinute: t.Cap.RequestsPerMinute,
		TTLMs: s.replicaTTL.Milliseconds(), PollMs: s.poll.Milliseconds()}
	if s.clock != nil {
		args.ClockMs = s.clock().UnixMilli()
	}
	arg, err := json.Marshal(args)
	if err != nil {
		return capAnswer{}, fmt.Errorf("quota: redis cap: %w", err)
	}
	out, err := CapScript.Run(ctx, s.client, capKeys(s.prefix, t.Name), arg).Text()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return capAnswer{}, fmt.Errorf("quota: redis cap: %w", err)
	}
	var r capReply
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return capAnswer{}, fmt.Errorf("quota: redis cap: reply: %w", err)
	}
	if r.Granted < 0 || r.Granted > t.Want || r.Fleet < 0 || r.RetryMs < 0 {
		return capAnswer{}, fmt.Errorf("quota: redis cap: reply %s out of range", out)
	}
	return capAnswer{Granted: r.Granted, FleetInFlight: r.Fleet, Sec: r.Sec,
		RetryAfter: time.Duration(r.RetryMs) * time.Millisecond}, nil
}
