package gate

import (
	"context"
	_ "embed" // the Lua script
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

//go:embed budget.lua
var budgetLua string

// BudgetScript runs through EVALSHA, falling back to EVAL on NOSCRIPT.
var BudgetScript = redis.NewScript(budgetLua)

var _ BudgetStore = (*RedisBudgets)(nil)

// RedisBudgets is the BudgetStore a fleet shares: every budget period is a
// hash in Redis, all under the one hash tag {prefix:budget}, and every
// call is one budget.lua call, bounded by store.budget_timeout. A
// reservation is a field of its own, its id prefixed by its replica's —
// random at every start, so a replica never meets its previous life's
// reservations — so that the reservations of a replica that stopped
// calling can be told apart and charged in full (budget.lua). A call
// whose answer was lost may be made again: budget.lua makes a repeated
// reserve or settle change nothing.
type RedisBudgets struct {
	client  redis.Scripter
	prefix  string
	replica string
	// ttl is how long a silent replica's reservations stay reservations:
	// it tells the store it is alive (alive) while it holds any.
	ttl     time.Duration
	timeout time.Duration
	// clock, when set (tests only), replaces Redis TIME and the periods'
	// expiry.
	clock func() time.Time
}

// NewRedisBudgets returns the budget store on client under cfg's
// key_prefix, its calls bounded by cfg's budget_timeout and a silent
// replica's reservations lasting three heartbeats; replica names this
// replica (the pools' store's name).
func NewRedisBudgets(client redis.Scripter, cfg store.Config, replica string) *RedisBudgets {
	return &RedisBudgets{client: client, prefix: cfg.KeyPrefix, replica: replica, ttl: 3 * cfg.Heartbeat, timeout: cfg.BudgetTimeout}
}

// errBudgetTimeout is the cause of a budget call that ran out of
// store.budget_timeout.
var errBudgetTimeout = errors.New("quota: redis budget call exceeded store.budget_timeout")

// maxScriptMoney is the most any amount sent to budget.lua may be: Lua's
// doubles hold integers exactly up to 2^53, and sums of two must too.
const maxScriptMoney = price.Nanodollars(1 << 52)

// budgetArgs is budget.lua's one argument.
type budgetArgs struct {
	Op      string              `json:"op"`
	ID      string              `json:"id"`
	Replica string              `json:"replica"`
	Cost    price.Nanodollars   `json:"cost"`
	Limits  []price.Nanodollars `json:"limits"`
	ExpireS []int64             `json:"expire_s"`
	TTLMs   int64               `json:"ttl_ms"`
	ClockMs int64               `json:"clock_ms"`
	// Force makes a reserve whatever the budgets have left (force).
	Force bool `json:"force,omitempty"`
}

// budgetReply is budget.lua's reply.
type budgetReply struct {
	Outcome budgetOutcome `json:"outcome"`
	Refused int           `json:"refused"`
	Use     [][2]string   `json:"use"`
}

// budgetKeyTTL is how long a budget period's hash outlives the period:
// long enough to read the last period's spend after it reset.
const budgetKeyTTL = 35 * 24 * time.Hour

// call runs op on keys, for reservation id.
func (s *RedisBudgets) call(ctx context.Context, op string, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error) {
	return s.callArgs(ctx, budgetArgs{Op: op}, keys, id, cost)
}

// callArgs runs args' op (and flags) on keys, for reservation id.
func (s *RedisBudgets) callArgs(ctx context.Context, args budgetArgs, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errBudgetTimeout)
	defer cancel()
	now := time.Now()
	args.ID, args.Replica, args.Cost, args.TTLMs = id, s.replica, min(max(cost, 0), maxScriptMoney), s.ttl.Milliseconds()
	if s.clock != nil {
		now = s.clock()
		args.ClockMs = now.UnixMilli()
	}
	tag := "{" + s.prefix + ":budget}:"
	rkeys := make([]string, 2, len(keys)+2)
	rkeys[0], rkeys[1] = tag+"alive", tag+"settled:"+id
	for _, k := range keys {
		rkeys = append(rkeys, tag+k.Budget+":"+k.Period)
		args.Limits = append(args.Limits, min(k.Limit, maxScriptMoney))
		args.ExpireS = append(args.ExpireS, int64(max(k.Resets.Sub(now)+budgetKeyTTL, time.Hour)/time.Second))
	}
	arg, err := json.Marshal(args)
	if err != nil {
		return budgetAnswer{}, err
	}
	raw, err := BudgetScript.Run(ctx, s.client, rkeys, arg).Text()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return budgetAnswer{}, err
	}
	var rep budgetReply
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		return budgetAnswer{}, fmt.Errorf("budget.lua reply %q: %w", raw, err)
	}
	ans := budgetAnswer{Outcome: rep.Outcome, Refused: rep.Refused, Use: make([]budgetUse, len(rep.Use))}
	for i, u := range rep.Use {
		spent, err1 := strconv.ParseInt(u[0], 10, 64)
		held, err2 := strconv.ParseInt(u[1], 10, 64)
		if err1 != nil || err2 != nil {
			return budgetAnswer{}, fmt.Errorf("budget.lua reply %q: not integers", raw)
		}
		ans.Use[i] = budgetUse{Spent: price.Nanodollars(spent), Reserved: price.Nanodollars(held)}
	}
	return ans, nil
}

// reserve implements BudgetStore.
func (s *RedisBudgets) reserve(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error) {
	return s.call(ctx, "reserve", keys, s.replica+":"+id, cost)
}

// force implements BudgetStore.
func (s *RedisBudgets) force(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	_, err := s.callArgs(ctx, budgetArgs{Op: "reserve", Force: true}, keys, s.replica+":"+id, cost)
	return err
}

// settle implements BudgetStore.
func (s *RedisBudgets) settle(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	_, err := s.call(ctx, "settle", keys, s.replica+":"+id, cost)
	return err
}

// read implements BudgetStore.
func (s *RedisBudgets) read(ctx context.Context, keys []budgetKey) ([]budgetUse, error) {
	ans, err := s.call(ctx, "read", keys, "", 0)
	return ans.Use, err
}

// Alive tells the store this replica is alive, so that its reservations
// stay reservations for another ttl.
func (s *RedisBudgets) Alive(ctx context.Context) error {
	_, err := s.call(ctx, "alive", nil, "", 0)
	return err
}
