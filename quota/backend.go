package quota

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is the store a configuration asks for, with what the rest of the
// program needs to know about it.
type backend struct {
	// Store is what the limiter calls.
	Store store
	// Heartbeat is how often an idle limiter must call Store (0: never).
	Heartbeat time.Duration
	// Shared reports whether replicas share Store (Redis).
	Shared bool

	failover *failoverStore
	client   redis.UniversalClient
	store    StoreConfig
	replica  string
	log      *slog.Logger

	mu sync.Mutex
	// capStores are the callers' caps' failover stores, by caller, until
	// released; those left are closed with the backend.
	capStores map[string]*failoverStore
}

// probeEvery is how often a degraded store tries Redis again.
const probeEvery = 250 * time.Millisecond

// openBackend builds the store cfg describes: in-process when
// store.redis_url is empty, else Redis behind the store.on_error policy. It
// does not wait for Redis: a Redis that is down at start is a degraded
// store, not a failure to start.
func openBackend(cfg Config, log *slog.Logger) (*backend, error) {
	if !cfg.Store.Shared() {
		return &backend{Store: newMemoryStore(nil), store: cfg.Store, log: log}, nil
	}
	client, err := newRedisClient(cfg.Store.RedisURL, cfg.Store.Timeout)
	if err != nil {
		return nil, err
	}
	primary := newRedisStore(client, redisStoreOptions{
		KeyPrefix: cfg.Store.KeyPrefix, Timeout: cfg.Store.Timeout, Heartbeat: cfg.Store.Heartbeat,
	})
	b := &backend{Heartbeat: cfg.Store.Heartbeat, Shared: true, client: client,
		store: cfg.Store, replica: primary.Replica(), log: log.With(slog.String("replica", primary.Replica()))}
	b.failover = b.failoverFor(primary)
	b.Store = b.failover
	return b, nil
}

// failoverFor puts primary behind the store.on_error policy, with an
// in-process store for the per-replica limits each call brings.
func (b *backend) failoverFor(primary store) *failoverStore {
	ping := func(ctx context.Context) error { return b.client.Ping(ctx).Err() }
	return newFailoverStore(primary, newMemoryStore(nil), b.store.OnError, ping, probeEvery, b.log)
}

// capStore returns a store of its own for one caller's cap, keyed under
// {key_prefix:cap:name} in Redis, behind the same store.on_error policy.
func (b *backend) capStore(name string) store {
	if !b.Shared {
		return newMemoryStore(nil)
	}
	primary := newRedisStore(b.client, redisStoreOptions{
		KeyPrefix: b.store.KeyPrefix + ":cap:" + name, Timeout: b.store.Timeout, Heartbeat: b.store.Heartbeat, Replica: b.replica,
	})
	fs := b.failoverFor(primary)
	b.mu.Lock()
	if b.capStores == nil {
		b.capStores = map[string]*failoverStore{}
	}
	b.capStores[name] = fs
	b.mu.Unlock()
	return fs
}

// releaseCapStore stops the probe of name's cap store, once its limiter is
// gone; the Redis keys expire on their own.
func (b *backend) releaseCapStore(name string) {
	b.mu.Lock()
	fs := b.capStores[name]
	delete(b.capStores, name)
	b.mu.Unlock()
	if fs != nil {
		fs.Close()
	}
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
	if err := takeScript.Load(ctx, b.client).Err(); err != nil {
		log.Warn("store_warm_failed", slog.String("error", err.Error()))
	}
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

// Close stops probing and closes the Redis client.
func (b *backend) Close() error {
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
