package quota

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisMode is how store.redis_url reaches Redis.
type redisMode string

const (
	redisSingle   redisMode = "single"
	redisCluster  redisMode = "cluster"
	redisSentinel redisMode = "sentinel"
)

// parseRedisURL reads store.redis_url:
//
//	redis://[user:pass@]host:port/db                one server (rediss:// for TLS)
//	redis://host:port?addr=host2:port&addr=…        Redis Cluster (several seed nodes)
//	redis://host:port?cluster=true                  Redis Cluster from one seed node
//	redis://sentinel:26379?master_name=mymaster&addr=sentinel2:26379
//	                                                Sentinel
//
// Every go-redis URL option (dial_timeout, pool_size, …) is accepted.
func parseRedisURL(raw string) (redisMode, *url.URL, error) {
	mode, u, err := parseRedisURLUnredacted(raw)
	if err != nil && u != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			err = errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
		}
	}
	return mode, u, err
}

func parseRedisURLUnredacted(raw string) (redisMode, *url.URL, error) {
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

// newRedisClient connects to store.redis_url. Every call is bounded by
// timeout and never retried: a retry would double what a dead Redis costs.
func newRedisClient(raw string, timeout time.Duration) (redis.UniversalClient, error) {
	mode, u, err := parseRedisURL(raw)
	if err != nil {
		return nil, fmt.Errorf("quota: store.redis_url: %w", err)
	}
	switch mode {
	case redisSentinel:
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), timeout, timeout, -1
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o), nil
	case redisCluster:
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), timeout, timeout, -1
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	default:
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dialTimeout(timeout), timeout, timeout, -1
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	}
}

// dialTimeout leaves a TLS handshake more than one call's budget; each call
// is still bounded by its own context.
func dialTimeout(timeout time.Duration) time.Duration { return max(timeout, time.Second) }
