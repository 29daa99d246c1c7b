package quota

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backend is the store a configuration asks for, with what the rest of the
// program needs to know about it.
type Backend struct {
	// Store is what the Limiter calls.
	Store Store
	// Limits are what Store enforces: the fleet's with Redis, one replica's
	// in process.
	Limits Limits
	// Heartbeat is how often an idle Limiter must call Store (0: never).
	Heartbeat time.Duration
	// Shared reports whether replicas share Store (Redis).
	Shared bool

	failover *FailoverStore
	client   redis.UniversalClient
	store    StoreConfig
	replica  string
	log      *slog.Logger

	mu sync.Mutex
	// capStores are the callers' caps' failover stores, closed with the
	// backend.
	capStores []*FailoverStore
}

// probeEvery is how often a degraded store tries Redis again.
const probeEvery = 250 * time.Millisecond

// OpenBackend builds the store cfg describes: in-process when
// store.redis_url is empty, else Redis behind the store.on_error policy. It
// does not wait for Redis: a Redis that is down at start is a degraded
// store, not a failure to start.
func OpenBackend(cfg Config, log *slog.Logger) (*Backend, error) {
	if cfg.Store.RedisURL == "" {
		limits := cfg.PerReplica()
		return &Backend{Store: NewMemoryStore(limits, nil), Limits: limits, store: cfg.Store, log: log}, nil
	}
	client, err := NewRedisClient(cfg.Store.RedisURL, cfg.Store.Timeout)
	if err != nil {
		return nil, err
	}
	limits := cfg.Limits()
	primary := NewRedisStore(client, limits, RedisStoreOptions{
		KeyPrefix: cfg.Store.KeyPrefix, Timeout: cfg.Store.Timeout, Heartbeat: cfg.Store.Heartbeat,
	})
	b := &Backend{Limits: limits, Heartbeat: cfg.Store.Heartbeat, Shared: true, client: client,
		store: cfg.Store, replica: primary.Replica(), log: log.With(slog.String("replica", primary.Replica()))}
	b.failover = b.failoverFor(primary, cfg.PerReplica())
	b.Store = b.failover
	return b, nil
}

// failoverFor puts primary behind the store.on_error policy, with local
// enforcing the per-replica limits.
func (b *Backend) failoverFor(primary Store, local Limits) *FailoverStore {
	ping := func(ctx context.Context) error { return b.client.Ping(ctx).Err() }
	return NewFailoverStore(primary, NewMemoryStore(local, nil), b.store.OnError, ping, probeEvery, b.log)
}

// LimitsFor is what this backend's store enforces for cfg: the fleet's
// limits with Redis, one replica's in process.
func (b *Backend) LimitsFor(cfg Config) Limits {
	if b.Shared {
		return cfg.Limits()
	}
	return cfg.PerReplica()
}

// capStore returns a store of its own for one caller's cap, keyed under
// {key_prefix:cap:name} in Redis, behind the same store.on_error policy.
func (b *Backend) capStore(name string, cfg Config) Store {
	if !b.Shared {
		return NewMemoryStore(cfg.PerReplica(), nil)
	}
	primary := NewRedisStore(b.client, cfg.Limits(), RedisStoreOptions{
		KeyPrefix: b.store.KeyPrefix + ":cap:" + name, Timeout: b.store.Timeout, Heartbeat: b.store.Heartbeat, Replica: b.replica,
	})
	fs := b.failoverFor(primary, cfg.PerReplica())
	b.mu.Lock()
	b.capStores = append(b.capStores, fs)
	b.mu.Unlock()
	return fs
}

// warmTimeout bounds Warm: a first connection and TLS handshake may take
// longer than one call's store.timeout.
const warmTimeout = 2 * time.Second

// Warm connects to Redis and loads the script before the first request, so
// the first admission does not pay for the dial and the script load inside
// store.timeout. A failure is only logged: the store starts degraded and
// recovers when Redis answers.
func (b *Backend) Warm(ctx context.Context, log *slog.Logger) {
	if b.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	if err := takeScript.Load(ctx, b.client).Err(); err != nil {
		log.Warn("store_warm_failed", slog.String("error", err.Error()))
	}
}

// Degraded reports whether the shared store is bypassed after a failure.
func (b *Backend) Degraded() bool { return b.failover != nil && b.failover.Degraded() }

// Failures counts failed calls to the shared store.
func (b *Backend) Failures() int64 {
	if b.failover == nil {
		return 0
	}
	return b.failover.Failures()
}

// Close stops probing and closes the Redis client.
func (b *Backend) Close() error {
	if b.failover == nil {
		return nil
	}
	b.failover.Close()
	b.mu.Lock()
	for _, fs := range b.capStores {
		fs.Close()
	}
	b.mu.Unlock()
	return b.client.Close()
}
