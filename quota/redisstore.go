package quota

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua scripts
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/redis/go-redis/v9"
)

//go:embed take.lua
var takeLua string

// allowanceLua is the per-second allowance every quota script counts by,
// prepended to each (the formula written once in Lua).
//
//go:embed allowance.lua
var allowanceLua string

// takeScript runs through EVALSHA, falling back to EVAL (which loads it)
// when Redis answers NOSCRIPT, e.g. after SCRIPT FLUSH or a restart.
var takeScript = redis.NewScript(allowanceLua + takeLua)

var _ store = (*redisStore)(nil)

// errStoreTimeout is the cause of a Redis call that ran out of store.timeout.
var errStoreTimeout = errors.New("quota: redis call exceeded store.timeout")

// redisStore is the Store a fleet shares: the windows and every replica's
// in-flight count live in Redis, and each Take is one script call that
// decides atomically for the fleet. Windows follow Redis TIME, never a
// replica's clock. Each replica's count carries a heartbeat; a replica that
// stops calling (a crash) stops counting after its TTL.
//
// Each pool's limiter calls Take from one goroutine; redisStore holds
// no state but the pools' key names.
type redisStore struct {
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

// newRedisStore returns a store on client under cfg's key_prefix, calls
// bounded by its timeout, and this replica's slots expiring after three
// heartbeats without a call; each call brings the fleet limits it
// enforces. The replica's id is random.
func newRedisStore(client redis.Scripter, cfg StoreConfig) *redisStore {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &redisStore{
		client:       client,
		prefix:       cfg.KeyPrefix,
		replica:      hex.EncodeToString(b[:]),
		replicaTTL:   3 * cfg.Heartbeat,
		timeout:      cfg.Timeout,
		inFlightPoll: 25 * time.Millisecond,
	}
}

// Replica returns this replica's id, as it appears in Redis.
func (s *redisStore) Replica() string { return s.replica }

// Keys returns the Redis keys the store uses for pool.
func (s *redisStore) Keys(pool string) []string {
	if k, ok := s.keys.Load(pool); ok {
		return k.([]string)
	}
	k, _ := s.keys.LoadOrStore(pool, poolKeys(s.prefix, pool))
	return k.([]string)
}

// Take implements Store with one script call.
func (s *redisStore) Take(ctx context.Context, req takeRequest) (takeResult, error) {
	res, _, err := s.take(ctx, req)
	return res, err
}

// take.lua's arguments by position, 0-based into its ARGV (which Lua
// counts from 1): the script's ARG table names the same positions, and
// TestTakeScriptPositions holds the two equal. At argLists begin the
// lists: per class, interactive first, the number of listed waiters and
// each one's token estimate.
const (
	argReplica = iota
	argWantI
	argWantB
	argInFlightI
	argInFlightB
	argAccountRPM
	argBulkRPM
	argReserveRPM
	argInFlightBound
	argBulkInFlight
	argReserveInFlight
	argBorrow
	argReplicaTTL
	argClock
	argInFlightPoll
	argUpstreamAge
	argUpstreamHold
	argUpstreamThrottle
	argAccountTPM
	argBulkTPM
	argReserveTPM
	argCorrectionI
	argCorrectionB
	argOutputTPM
	argReserveOutputTPM
	argOutput
	argCreditsI
	argCreditsB
	argFair
	argLists
	numArgs
)

// take.lua's reply by position, 0-based; the script's REPLY table names
// the same positions.
const (
	replyGrantedI = iota
	replyGrantedB
	replyBlockerI
	replyBlockerB
	replyRetryMs
	replySec
	replyFleetI
	replyFleetB
	replyHoldMs
	replyUsedI
	replyUsedB
	replyTokensI
	replyTokensB
	replyLeftMs
	replyCreditsI
	replyCreditsB
	replyLen
)

// take is Take, also returning the window (Unix second) the script used.
func (s *redisStore) take(ctx context.Context, req takeRequest) (takeResult, int64, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errStoreTimeout)
	defer cancel()
	clock := ""
	if s.clock != nil {
		clock = strconv.FormatInt(s.clock().UnixMilli(), 10)
	}
	l := req.Limits
	borrow := "0"
	if l.Borrow {
		borrow = "1"
	}
	age, hold, throttle := "", int64(0), int64(0)
	if u := req.Upstream; u != nil {
		age, hold, throttle = strconv.FormatInt(u.Age.Milliseconds(), 10), u.Hold.Milliseconds(), u.ThrottleFor.Milliseconds()
	}
	const I, B = classify.Interactive, classify.Bulk
	args := make([]any, argLists, numArgs+1+len(req.Waiters[I])+len(req.Waiters[B]))
	args[argReplica] = s.replica
	args[argWantI], args[argWantB] = req.Want[I], req.Want[B]
	args[argInFlightI], args[argInFlightB] = req.InFlight[I], req.InFlight[B]
	args[argAccountRPM], args[argBulkRPM], args[argReserveRPM] = l.AccountRPM, l.BulkRPM, l.ReserveRPM
	args[argInFlightBound], args[argBulkInFlight], args[argReserveInFlight] = l.InFlight, l.BulkInFlight, l.ReserveInFlight
	args[argBorrow] = borrow
	args[argReplicaTTL], args[argClock], args[argInFlightPoll] = s.replicaTTL.Milliseconds(), clock, s.inFlightPoll.Milliseconds()
	args[argUpstreamAge], args[argUpstreamHold], args[argUpstreamThrottle] = age, hold, throttle
	args[argAccountTPM], args[argBulkTPM], args[argReserveTPM] = l.AccountTPM, l.BulkTPM, l.ReserveTPM
	args[argCorrectionI], args[argCorrectionB] = req.Corrections[I], req.Corrections[B]
	args[argOutputTPM], args[argReserveOutputTPM], args[argOutput] = l.OutputTPM, l.ReserveOutputTPM, req.Output
	args[argCreditsI], args[argCreditsB] = req.Credits[I], req.Credits[B]
	args[argFair] = fairMask(l.Fair)
	for _, ws := range req.Waiters {
		args = append(args, len(ws))
		for _, w := range ws {
			args = append(args, w.Cost)
		}
	}
	reply, err := takeScript.Run(ctx, s.client, s.Keys(req.Pool), args...).Int64Slice()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return takeResult{}, 0, fmt.Errorf("quota: redis take: %w", err)
	}
	res, err := parseTake(reply)
	if err != nil {
		return takeResult{}, 0, err
	}
	return res, reply[replySec], nil
}

// parseTake reads take.lua's reply, checking its shape.
func parseTake(r []int64) (takeResult, error) {
	if len(r) != replyLen {
		return takeResult{}, fmt.Errorf("quota: redis take: reply has %d values, want %d", len(r), replyLen)
	}
	const I, B = classify.Interactive, classify.Bulk
	var res takeResult
	res.Granted[I], res.Granted[B] = r[replyGrantedI], r[replyGrantedB]
	for c, v := range [...]int64{r[replyBlockerI], r[replyBlockerB]} {
		if v < 0 || v > int64(blockedByOutput) {
			return takeResult{}, fmt.Errorf("quota: redis take: blocker %d out of range", v)
		}
		res.Blocker[c] = blocker(v)
	}
	res.FleetInFlight[I], res.FleetInFlight[B] = r[replyFleetI], r[replyFleetB]
	res.FleetCredits[I], res.FleetCredits[B] = r[replyCreditsI], r[replyCreditsB]
	res.Window.Requests[I], res.Window.Requests[B] = r[replyUsedI], r[replyUsedB]
	res.Window.Tokens[I], res.Window.Tokens[B] = r[replyTokensI], r[replyTokensB]
	res.Window.Sec = r[replySec]
	res.RetryAfter = time.Duration(r[replyRetryMs]) * time.Millisecond
	res.UpstreamHold = time.Duration(r[replyHoldMs]) * time.Millisecond
	// Milliseconds are floored, so the second may end up to 1 ms sooner.
	res.SecondLeft = max(0, time.Duration(r[replyLeftMs]-1)*time.Millisecond)
	return res, nil
}
