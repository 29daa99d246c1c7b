package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Persistence is what a Redis keeps across its own restart, as CONFIG
// GET reports it: the append-only file (appendonly) and the RDB snapshot
// rules (save; "" is none).
type Persistence struct {
	AppendOnly bool
	Save       string
}

// ReadPersistence asks the Redis client reaches (with Cluster, the node it
// picks) for its appendonly and save settings. A Redis that refuses
// CONFIG GET — managed Redis often renames it or an ACL denies it — is an
// error: what it keeps cannot be told.
func ReadPersistence(ctx context.Context, client redis.UniversalClient) (Persistence, error) {
	var p Persistence
	for _, name := range []string{"appendonly", "save"} {
		m, err := client.ConfigGet(ctx, name).Result()
		if err != nil {
			return Persistence{}, fmt.Errorf("CONFIG GET %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok {
			return Persistence{}, fmt.Errorf("CONFIG GET %s: no such setting in the answer", name)
		}
		switch name {
		case "appendonly":
			p.AppendOnly = strings.EqualFold(v, "yes")
		case "save":
			p.Save = strings.TrimSpace(v)
		}
	}
	return p, nil
}

// errNoPersistence and errSnapshotsOnly are what a Redis restart loses
// under Persistence.Lost.
var (
	errNoPersistence = errors.New("redis persists nothing (appendonly no, save \"\"): a Redis restart sets every budget's spend to $0 " +
		"and forgets every reservation and batch record; run it with appendonly yes (redis-server --appendonly yes --dir <a directory that outlives it>, " +
		"or CONFIG SET appendonly yes then CONFIG REWRITE)")
	errSnapshotsOnly = errors.New("redis keeps only RDB snapshots (appendonly no): a Redis restart loses every budget's spend since the last snapshot; " +
		"run it with appendonly yes (redis-server --appendonly yes --dir <a directory that outlives it>, or CONFIG SET appendonly yes then CONFIG REWRITE)")
)

// Lost says what of the budgets' spend a restart of a Redis that keeps p
// would lose, nil when it keeps it (appendonly yes: with the default
// appendfsync everysec, at most the last second).
func (p Persistence) Lost() error {
	switch {
	case p.AppendOnly:
		return nil
	case p.Save == "":
		return errNoPersistence
	default:
		return fmt.Errorf("%w (save %q)", errSnapshotsOnly, p.Save)
	}
}
