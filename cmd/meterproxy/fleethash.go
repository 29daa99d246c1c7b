package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// fleetPart is what the replicas of a fleet must agree on for their
// decisions to be one fleet's: the mode, the account and its pools, the
// classes, the callers, the prices, how requests are classified, the
// upstream and its accounts (their limits, URLs and the names of the
// variables that hold their keys), and the store's key prefix, under
// which replicas share their counters. Left out is what is a replica's
// own — the server section (listen addresses, the admin token, its
// memory and body bounds), the store's address and timeouts, logging and
// tracing — and every secret: the upstream's api_key, and a caller's key,
// which the configuration names only by its key_env variable or its
// key_sha256 (already a hash, and in the file).
type fleetPart struct {
	Mode      Mode                 `json:"mode"`
	Account   quota.AccountConfig  `json:"account"`
	Classes   quota.ClassesConfig  `json:"classes"`
	Callers   []classify.Caller    `json:"callers"`
	Prices    price.Table          `json:"prices"`
	Classify  classify.Config      `json:"classify"`
	Upstream  proxy.UpstreamConfig `json:"upstream"`
	KeyPrefix string               `json:"key_prefix"`
}

// configHash identifies what a fleet must agree on (fleetPart): the
// first 12 hex digits of the SHA-256 of its JSON form. Two replicas that
// differ only in their listen addresses, admin tokens or log levels have
// one hash; a limit that differs makes two.
func (c Config) configHash() string {
	up := c.Upstream
	up.APIKey = "" // a secret: never hashed, even truncated
	b, err := json.Marshal(fleetPart{Mode: c.Mode, Account: c.Account, Classes: c.Classes, Callers: c.Callers, Prices: c.Prices,
		Classify: c.Classify, Upstream: up, KeyPrefix: c.Store.KeyPrefix})
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
