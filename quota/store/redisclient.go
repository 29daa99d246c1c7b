package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisMode is how store.redis_url reaches Redis.
type RedisMode string

const (
	redisSingle   RedisMode = "single"
	redisCluster  RedisMode = "cluster"
	redisSentinel RedisMode = "sentinel"
)

// ParseRedisURL reads store.redis_url:
//
//	redis://[user:pass@]host:port/db                one server (rediss:// for TLS)
//	redis://host:port?addr=host2:port&addr=…        Redis Cluster (several seed nodes)
//	redis://host:port?cluster=true                  Redis Cluster from one seed node
//	redis://sentinel:26379?master_name=mymaster&addr=sentinel2:26379
//	                                                Sentinel
//
// Every go-redis URL option (dial_timeout, pool_size, …) is accepted.
func ParseRedisURL(raw string) (RedisMode, *url.URL, error) {
	mode, u, err := parseRedisURLUnredacted(raw)
	if err != nil && u != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			err = errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
		}
	}
	return mode, u, err
}

func parseRedisURLUnredacted(raw string) (RedisMode, *url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, errors.New("not a valid URL") // url.Parse's error would quote it, password and all
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", nil, fmt.Errorf("scheme must be redis:// or rediss://, got %q", u.Scheme)
	}
	if u.Host == "" {
		return "", nil, fmt.Errorf("no host")
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		_, err = redis.ParseFailoverURL(raw)
		return redisSentinel, u, err
	case q.Has("addr") || q.Get("cluster") == "true":
		q.Del("cluster")
		u.RawQuery = q.Encode()
		_, err = redis.ParseClusterURL(u.String())
		return redisCluster, u, err
	default:
		_, err = redis.ParseURL(raw)
		return redisSingle, u, err
	}
}

// NewRedisClient connects to store.redis_url, verifying a rediss:// server's
// certificate against store.tls_ca_file when it is set (else the system's
// roots). Every call is bounded by store.timeout (a budget call by
// store.budget_timeout, through its context), and go-redis does not retry
// it (MaxRetries -1): a retry would double what a dead Redis costs. A
// Cluster's redirects are the one exception, below.
//
// Failover, by mode:
//   - Cluster: a call that finds its master dead fails within the timeout
//     (MaxRedirects, go-redis's default of 3, follows MOVED and ASK after
//     a resharding or a failover and may try the dead node again while the
//     call's context lasts; ReadOnly stays off, since the script writes).
//     go-redis reloads its slot map only on MOVED, ASK and READONLY
//     answers, or after ClusterStateReloadInterval (60 s): a dead master
//     answers nothing, so without a reload every call would keep going to
//     it for a minute after its replica took over. The degraded store's
//     probe therefore reloads the map before it pings the masters (see
//     Probe).
//   - Sentinel: every new connection asks a sentinel for the master, and
//     go-redis follows the sentinels' +switch-master; RouteByLatency and
//     ReplicaOnly would read from replicas, which the script must not.
//   - Dial retries: one attempt per dial (DialerRetries 1, where go-redis
//     has the knob) so a refused connection fails the call at once instead
//     of after four 100 ms backoffs that outlast store.timeout. Sentinel
//     mode keeps go-redis's retries: each retried dial asks the sentinels
//     again, which is how it finds a new master.
func NewRedisClient(cfg Config) (redis.UniversalClient, error) {
	// Each call's context bounds it (store.timeout, or
	// store.budget_timeout for a budget call); the sockets' deadlines
	// must let the longer one run.
	raw, timeout, ioTimeout := cfg.RedisURL, cfg.Timeout, max(cfg.Timeout, cfg.BudgetTimeout)
	mode, u, err := ParseRedisURL(raw)
	if err != nil {
		return nil, fmt.Errorf("quota: store.redis_url: %w", err)
	}
	roots, err := LoadTLSCA(cfg.TLSCAFile, u)
	if err != nil {
		return nil, fmt.Errorf("quota: store.tls_ca_file: %w", err)
	}
	switch mode {
	case redisSentinel:
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), ioTimeout, ioTimeout, -1
		o.ContextTimeoutEnabled = true
		withRoots(o.TLSConfig, roots)
		return redis.NewFailoverClient(o), nil
	case redisCluster:
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), ioTimeout, ioTimeout, -1
		o.ContextTimeoutEnabled = true
		o.DialerRetries = 1
		withRoots(o.TLSConfig, roots)
		return redis.NewClusterClient(o), nil
	default:
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), ioTimeout, ioTimeout, -1
		o.ContextTimeoutEnabled = true
		o.DialerRetries = 1
		withRoots(o.TLSConfig, roots)
		return redis.NewClient(o), nil
	}
}

// Probe returns the call that tells a degraded store whether Redis
// answers again. For one server or Sentinel it is a PING. For a Cluster a
// PING would go to any node and answer while the master of the fleet's
// slot is dead: the store would come back only to fail its next call, over
// and over until go-redis's periodic reload. There it reloads the slot map
// (CLUSTER SLOTS from a node that answers; go-redis routes every later call
// by it) and pings every master the map names: the account and each model
// pool are a slot of their own, and with Redis's default
// cluster-require-full-coverage no slot is served while one is not.
func Probe(client redis.UniversalClient) func(context.Context) error {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return func(ctx context.Context) error { return client.Ping(ctx).Err() }
	}
	return func(ctx context.Context) error {
		return cc.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
			return master.Ping(ctx).Err()
		})
	}
}

// dialTimeout leaves a TLS handshake more than one call's budget; each call
// is still bounded by its own context.
func dialTimeout(timeout time.Duration) time.Duration { return max(timeout, time.Second) }
