package quota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// backend is the store a configuration asks for, with what the rest of the
// program needs to know about it.
type backend struct {
	// Store is what the limiter calls.
	Store store.Store
	// Caps counts the callers' caps (gate.CapGate).
	Caps gate.CapCounter
	// Adapt keeps the pools' adaptive bounds (adaptiveRun).
	Adapt store.AdaptStore
	// Budgets keeps the spend budgets (gate.BudgetGate); BudgetsAlive, with
	// Redis, keeps this replica's reservations alive there; spend is the
	// in-process store and the file it is kept in (store.spend_file).
	Budgets      gate.BudgetStore
	BudgetsAlive func(context.Context) error
	// Batches keeps the batches' metered files and records.
	Batches gate.BatchStore
	spend   spendFile
	// Heartbeat is how often an idle limiter must call Store (0: never).
	Heartbeat time.Duration
	// Shared reports whether replicas share Store (Redis).
	Shared bool

	failover *store.Failover
	client   redis.UniversalClient
	log      *slog.Logger
}

// spendFile is the in-process budgets (nil with Redis) and the file their
// spend is kept in ("": none).
type spendFile struct {
	budgets *gate.MemoryBudgets
	path    string
}

// kept reports whether the spend is kept in a file.
func (f spendFile) kept() bool { return f.budgets != nil && f.path != "" }

// probeEvery is how often a degraded store tries Redis again.
const probeEvery = 250 * time.Millisecond

// openBackend builds the store cfg describes: in-process when
// store.redis_url is empty, else Redis behind the store.on_error policy. It
// does not wait for Redis: a Redis that is down at start is a degraded
// store, not a failure to start.
func openBackend(cfg Config, log *slog.Logger) (*backend, error) {
	if !cfg.Store.Shared() {
		spend := gate.NewMemoryBudgets()
		if f := cfg.Store.SpendFile; f != "" {
			if err := spend.Load(f); err != nil {
				return nil, fmt.Errorf("store.spend_file: %w", err)
			}
		}
		return &backend{Store: store.NewMemory(nil), Caps: gate.NewMemoryCapCounter(nil), Adapt: store.NewMemoryAdapt(nil),
			Budgets: spend, Batches: gate.NewMemoryBatches(spend), spend: spendFile{budgets: spend, path: cfg.Store.SpendFile}, log: log}, nil
	}
	client, err := store.NewRedisClient(cfg.Store)
	if err != nil {
		return nil, err
	}
	redisLogs := store.RouteRedisLogs(log)
	primary := store.NewRedis(client, cfg.Store)
	b := &backend{Heartbeat: cfg.Store.Heartbeat, Shared: true, client: client,
		log: log.With(slog.String("replica", primary.Replica()))}
	// Behind the store.on_error policy, with an in-process store for the
	// per-replica limits each call brings.
	probe := store.Probe(client)
	b.failover = store.NewFailover(primary, store.NewMemory(nil), cfg.Store.OnError, probe, probeEvery, b.log)
	b.failover.OnRecovered(redisLogs.Flush) // go-redis's count of the outage's messages, at its end
	b.Store = b.failover
	b.Caps = gate.NewFailoverCapCounter(gate.NewRedisCapCounter(client, cfg.Store, primary.Replica()), gate.NewMemoryCapCounter(nil), b.failover)
	b.Adapt = store.NewFailoverAdapt(store.NewRedisAdapt(client, cfg.Store, primary.Replica()), b.failover)
	// Budgets fail closed, whatever store.on_error says: no replica can
	// tell alone what the fleet has spent; budgets.on_store_error: local
	// bounds each replica to its share of what was left.
	budgets := gate.NewRedisBudgets(client, cfg.Store, primary.Replica())
	b.Budgets, b.BudgetsAlive = budgets, budgets.Alive
	if cfg.Budgets.OnStoreError == gate.StoreErrorLocal {
		b.Budgets = gate.NewLocalBudgets(budgets, b.failover, fleetReplicas(cfg))
	}
	b.Batches = gate.NewRedisBatches(client, cfg.Store, primary.Replica())
	return b, nil
}

// fleetReplicas is how many replicas share the budgets, for their local
// shares: the most expected_replicas of any account (the fleet is the
// same whichever account it sends to; the larger count is the smaller,
// safer share).
func fleetReplicas(cfg Config) int64 {
	n := cfg.Account.ExpectedReplicas
	for _, a := range cfg.Accounts {
		n = max(n, a.Account.ExpectedReplicas)
	}
	return n
}

// warmTimeout bounds Warm: a first connection and TLS handshake may take
// longer than one call's store.timeout.
const warmTimeout = 2 * time.Second

// Warm connects to Redis and loads the script before the first request, so
// the first admission does not pay for the dial and the script load inside
// store.timeout. A failure is only logged: the store starts degraded and
// recovers when Redis answers.
func (b *backend) Warm(ctx context.Context, log *slog.Logger) {
	if b.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	for _, script := range []*redis.Script{store.TakeScript, gate.CapScript, store.AdaptScript, gate.BudgetScript, gate.BatchScript} {
		if err := script.Load(ctx, b.client).Err(); err != nil {
			log.Warn("store_warm_failed", slog.String("error", err.Error()))
			return
		}
	}
}

// checkPersistence warns, with Redis, when budgets' spend would not
// survive a Redis restart (redis_not_persistent), and says so when Redis
// will not tell (redis_persistence_unknown: CONFIG GET refused, as
// managed Redis often does). It never fails the start.
func (b *backend) checkPersistence(ctx context.Context) {
	if b.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	p, err := store.ReadPersistence(ctx, b.client)
	if err != nil {
		b.log.Info("redis_persistence_unknown", slog.String("reason", "budgets are configured and meterproxy could not read Redis's persistence settings, "+
			"so it cannot tell whether their spend survives a Redis restart: make sure Redis runs with appendonly yes"), slog.String("error", err.Error()))
		return
	}
	if lost := p.Lost(); lost != nil {
		b.log.Warn("redis_not_persistent", slog.String("reason", "budgets are configured and "+lost.Error()))
	}
}

// LocalFallback reports whether admission runs on the per-replica limits
// now: Redis is bypassed after a failure under store.on_error local.
func (b *backend) LocalFallback() bool {
	return b.Degraded() && b.failover.Policy() == store.OnErrorLocal
}

// Degraded reports whether the shared store is bypassed after a failure.
func (b *backend) Degraded() bool { return b.failover != nil && b.failover.Degraded() }

// Failures counts failed calls to the shared store.
func (b *backend) Failures() int64 {
	if b.failover == nil {
		return 0
	}
	return b.failover.Failures()
}

// keepSpend keeps the in-process budgets' spend in store.spend_file until
// ctx ends; without one it returns at once.
func (b *backend) keepSpend(ctx context.Context) {
	if b.spend.kept() {
		b.spend.budgets.Keep(ctx, b.spend.path, b.log)
	}
}

// saveSpend writes the in-process budgets' spend to store.spend_file now,
// if there is one: the last save, after the budget gate's last settles.
func (b *backend) saveSpend() {
	if !b.spend.kept() {
		return
	}
	if err := b.spend.budgets.Save(b.spend.path); err != nil {
		b.log.Error("spend_file_save_failed", slog.String("file", b.spend.path), slog.String("error", err.Error()))
	}
}

// Close stops probing and closes the Redis client.
func (b *backend) Close() error {
	if b.failover == nil {
		return nil
	}
	b.failover.Close()
	return b.client.Close()
}
