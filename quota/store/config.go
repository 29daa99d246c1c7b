package store

import (
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// Config says where the counters live.
type Config struct {
	// RedisURL selects the Redis store, the fleet's shared one: a
	// redis:// or rediss:// URL. Empty means the in-process store.
	RedisURL string `koanf:"redis_url"`
	// KeyPrefix prefixes every Redis key ({key_prefix}:…); replicas that
	// share a quota use the same.
	KeyPrefix string `koanf:"key_prefix"`
	// OnError is what to do when the store fails: local (per-replica
	// limits), open (no limits) or closed (503).
	OnError OnError `koanf:"on_error"`
	// Timeout bounds each Redis call; past it the call counts as failed
	// and OnError applies.
	Timeout time.Duration `koanf:"timeout"`
	// BudgetTimeout bounds each budget call instead (callers' and
	// classes' budget; package quota/gate's budgetredis.go): past it the budgeted request is
	// refused, 503 store_unavailable (budgets fail closed), so it is given
	// longer. See "Spend and budgets".
	BudgetTimeout time.Duration `koanf:"budget_timeout"`
	// Heartbeat is the longest a replica stays silent towards Redis about a
	// pool while the pool is live there: it holds slots in it or has
	// waiters, or the fleet holds slots or bulk is held (a pool idle across
	// the fleet costs no calls); a replica's slots expire after three
	// heartbeats without a call.
	Heartbeat time.Duration `koanf:"heartbeat"`
	// SpendFile, with the in-process store, is the file budgets' spend is
	// kept in across restarts (written every second; see package
	// quota/gate's budgetfile.go);
	// empty keeps it in memory only, from $0 at every start. With Redis,
	// spend is kept there, and setting both refuses the start: the file
	// would be ignored, its spend lost without a word.
	SpendFile string `koanf:"spend_file"`
	// TLSCAFile is a PEM bundle of the certificate authorities that verify
	// Redis's certificate on a rediss:// RedisURL (one server, Cluster or
	// Sentinel); empty means the system's roots. Unreadable, not PEM, or
	// set without rediss://, meterproxy refuses to start.
	TLSCAFile string `koanf:"tls_ca_file"`
}

// Shared reports whether the store is shared by replicas (Redis): then the
// store enforces the fleet's limits, and each replica's (fleet ÷
// expected_replicas) are the fallback; in process they are what it
// enforces.
func (s Config) Shared() bool { return s.RedisURL != "" }

// OnError is a store.on_error policy: what admission does while the
// shared store (Redis) fails.
type OnError string

// The store.on_error policies.
const (
	// OnErrorLocal falls back to per-replica limits (fleet ÷ expected_replicas).
	OnErrorLocal OnError = "local"
	// OnErrorOpen admits without limits.
	OnErrorOpen OnError = "open"
	// OnErrorClosed refuses with ErrStoreUnavailable (a 503).
	OnErrorClosed OnError = "closed"
)

// OnErrorPolicies are the store.on_error values.
var OnErrorPolicies = []OnError{OnErrorLocal, OnErrorOpen, OnErrorClosed}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another policy is refused at load, by key.
func (p *OnError) UnmarshalText(b []byte) error {
	return configcheck.SetOneOf(p, b, OnErrorPolicies...)
}
