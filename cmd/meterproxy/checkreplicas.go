package main

import (
	"fmt"
	"log/slog"

	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/store"
)

// replicasWarnings says, for a fleet on Redis whose on_error is local,
// each account left at expected_replicas 1: in a Redis outage every
// replica falls back to the fleet's limits divided by expected_replicas —
// by 1, the whole fleet's — so the fleet together would allow its limits
// times its replicas. Nothing otherwise.
func replicasWarnings(cfg Config) []string {
	q := cfg.quota()
	if !q.Store.Shared() || q.Store.OnError != store.OnErrorLocal {
		return nil
	}
	warn := func(key string, a quota.AccountConfig) string {
		return fmt.Sprintf("%s is 1 with a Redis store and store.on_error: local: while Redis is out each replica falls back to "+
			"the fleet's limits divided by expected_replicas, so every replica alone would allow the whole %d requests/min and %d in flight, "+
			"and N replicas N times that: set it to the number of replicas you run", key, a.RequestsPerMinute, a.MaxInFlight)
	}
	var out []string
	if len(q.Accounts) == 0 {
		if q.Account.ExpectedReplicas == 1 {
			out = append(out, warn("account.expected_replicas", q.Account))
		}
		return out
	}
	for i, a := range cfg.Upstream.Accounts {
		if ac := q.ForAccount(a.Name).Account; ac.ExpectedReplicas == 1 {
			out = append(out, warn(fmt.Sprintf("upstream.accounts[%d] (%s): expected_replicas (its own, or account.expected_replicas)", i, a.Name), ac))
		}
	}
	return out
}

// logReplicasWarnings logs replicasWarnings at start.
func logReplicasWarnings(log *slog.Logger, cfg Config) {
	for _, w := range replicasWarnings(cfg) {
		log.Warn("expected_replicas_unset", slog.String("reason", w))
	}
}
