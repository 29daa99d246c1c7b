package store

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua scripts
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed take.lua
var takeLua string

// AllowanceLua is the per-second allowance every quota script counts by,
// prepended to each (the formula written once in Lua).
//
//go:embed allowance.lua
var AllowanceLua string

// TakeScript runs through EVALSHA, falling back to EVAL (which loads it)
// when Redis answers NOSCRIPT, e.g. after SCRIPT FLUSH or a restart.
var TakeScript = redis.NewScript(AllowanceLua + takeLua)

var _ Store = (*Redis)(nil)

// ErrTimeout is the cause of a Redis call that ran out of store.timeout.
var ErrTimeout = errors.New("quota: redis call exceeded store.timeout")

// Redis is the Store a fleet shares: the windows and every replica's
// in-flight count live in Redis, and each Take is one script call that
// decides atomically for the fleet. Windows follow Redis TIME, never a
// replica's clock. Each replica's count carries a heartbeat; a replica that
// stops calling (a crash) stops counting after its TTL.
//
// Each pool's limiter calls Take from one goroutine; Redis holds
// no state but the pools' key names.
type Redis struct {
	client  redis.Scripter
	prefix  string
	keys    sync.Map // pool name -> []string, its keys (poolKeys)
	replica string
	// replicaTTL is how long a silent replica keeps its slots.
	replicaTTL time.Duration
	timeout    time.Duration
	// inFlightPoll is how soon to ask again when only the in-flight bound
	// blocks: slots freed by other replicas send no signal here.
	inFlightPoll time.Duration
	// clock, when set (tests only), replaces Redis TIME for the windows.
	clock func() time.Time
}

// NewRedis returns a store on client under cfg's key_prefix, calls
// bounded by its timeout, and this replica's slots expiring after three
// heartbeats without a call; each call brings the fleet limits it
// enforces. The replica's id is random.
func NewRedis(client redis.Scripter, cfg Config) *Redis {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &Redis{
		client:       client,
		prefix:       cfg.KeyPrefix,
		replica:      hex.EncodeToString(b[:]),
		replicaTTL:   3 * cfg.Heartbeat,
		timeout:      cfg.Timeout,
		inFlightPoll: 25 * time.Millisecond,
	}
}

// Replica returns this replica's id, as it appears in Redis.
func (s *Redis) Replica() string { return s.replica }

// Keys returns the Redis keys the store uses for pool.
func (s *Redis) Keys(pool string) []string {
	if k, ok := s.keys.Load(pool); ok {
		return k.([]string)
	}
	k, _ := s.keys.LoadOrStore(pool, poolKeys(s.prefix, pool))
	return k.([]string)
}

// Take implements Store with one script call.
func (s *Redis) Take(ctx context.Context, req TakeRequest) (TakeResult, error) {
	res, _, err := s.take(ctx, req)
	return res, err
}

// take is Take, also returning the window (Unix second) the script used.
func (s *Redis) take(ctx context.Context, req TakeRequest) (TakeResult, int64, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, ErrTimeout)
	defer cancel()
	arg, err := json.Marshal(s.newTakeArgs(req))
	if err != nil {
		return TakeResult{}, 0, fmt.Errorf("quota: redis take: %w", err)
	}
	out, err := TakeScript.Run(ctx, s.client, s.Keys(req.Pool), arg).Text()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return TakeResult{}, 0, fmt.Errorf("quota: redis take: %w", err)
	}
	res, err := parseTakeReply(out)
	if err != nil {
		return TakeResult{}, 0, fmt.Errorf("quota: redis take: reply: %w", err)
	}
	return res, res.Window.Sec, nil
}
