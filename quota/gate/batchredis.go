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

//go:embed batch.lua
var batchLua string

// BatchScript runs through EVALSHA, falling back to EVAL on NOSCRIPT.
var BatchScript = redis.NewScript(batchLua)

var _ BatchStore = (*RedisBatches)(nil)

// RedisBatches is the BatchStore a fleet shares, beside its budgets
// (RedisBudgets) under the same hash tag {prefix:budget}: a file is a
// string file:<id>, a batch's record a string batch:<id>, the enqueued
// tokens one hash; binding and ending a batch are batch.lua calls.
type RedisBatches struct {
	client  redis.UniversalClient
	prefix  string
	replica string
	timeout time.Duration
}

// NewRedisBatches returns the batches a fleet shares in Redis, on client
// under cfg's key_prefix, calls bounded by its timeout, on behalf of
// replica.
func NewRedisBatches(client redis.UniversalClient, cfg store.Config, replica string) *RedisBatches {
	return &RedisBatches{client: client, prefix: cfg.KeyPrefix, replica: replica, timeout: cfg.Timeout}
}

// key is the Redis key of name under the budgets' hash tag.
func (s *RedisBatches) key(name string) string { return "{" + s.prefix + ":budget}:" + name }

// maxStoredJSON bounds what is read back of a file or a record: each is a
// few hundred bytes (price.MaxBatchModels models at most).
const maxStoredJSON = 64 << 10

func (s *RedisBatches) put(ctx context.Context, key string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.client.Set(ctx, key, b, batchTTL).Err()
}

func (s *RedisBatches) get(ctx context.Context, key string, v any) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.client.Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	case len(b) > maxStoredJSON:
		return false, fmt.Errorf("%s: %d bytes, not what meterproxy stores", key, len(b))
	}
	return true, json.Unmarshal(b, v)
}

// PutFile implements BatchStore.
func (s *RedisBatches) PutFile(ctx context.Context, id string, f price.BatchFile) error {
	return s.put(ctx, s.key("file:"+id), f)
}

// File implements BatchStore.
func (s *RedisBatches) File(ctx context.Context, id string) (price.BatchFile, bool, error) {
	var f price.BatchFile
	ok, err := s.get(ctx, s.key("file:"+id), &f)
	return f, ok, err
}

func (s *RedisBatches) record(ctx context.Context, id string) (BatchRecord, bool, error) {
	var r BatchRecord
	ok, err := s.get(ctx, s.key("batch:"+id), &r)
	return r, ok, err
}

// batchArgs is batch.lua's one argument.
type batchArgs struct {
	Op      string            `json:"op"`
	Record  string            `json:"record,omitempty"`
	TTLS    int64             `json:"ttl_s"`
	Pending string            `json:"pending,omitempty"`
	Field   string            `json:"field"`
	Cost    price.Nanodollars `json:"cost"`
	Where   string            `json:"where"`
	Tokens  int64             `json:"tokens"`
	ExpireS []int64           `json:"expire_s"`
}

// call runs batch.lua's op for rec.
func (s *RedisBatches) call(ctx context.Context, args batchArgs, rec BatchRecord) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	where, err := json.Marshal(BatchEnqueued{Account: rec.Enqueued.Account, Pool: rec.Enqueued.Pool, Class: rec.Enqueued.Class})
	if err != nil {
		return err
	}
	args.Where, args.Tokens, args.Field = string(where), rec.Tokens, batchReservation(rec.ID)
	args.TTLS = int64(batchTTL / time.Second)
	args.Cost = min(max(args.Cost, 0), maxScriptMoney)
	keys := []string{s.key("batch:" + rec.ID), s.key("batch_enqueued")}
	now := time.Now()
	for _, k := range rec.Keys {
		keys = append(keys, s.key(k.Budget+":"+k.Period))
		args.ExpireS = append(args.ExpireS, int64(max(k.Resets.Sub(now)+budgetKeyTTL, time.Hour)/time.Second))
	}
	arg, err := json.Marshal(args)
	if err != nil {
		return err
	}
	return BatchScript.Run(ctx, s.client, keys, arg).Err()
}

func (s *RedisBatches) bind(ctx context.Context, rec BatchRecord, pending string) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.call(ctx, batchArgs{Op: "bind", Record: string(b), Pending: "r:" + s.replica + ":" + pending}, rec)
}

func (s *RedisBatches) end(ctx context.Context, rec BatchRecord, cost price.Nanodollars) error {
	return s.call(ctx, batchArgs{Op: "end", Cost: cost}, rec)
}

func (s *RedisBatches) enqueued(ctx context.Context) ([]BatchEnqueued, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	m, err := s.client.HGetAll(ctx, s.key("batch_enqueued")).Result()
	if err != nil {
		return nil, err
	}
	out := make([]BatchEnqueued, 0, len(m))
	for where, v := range m {
		var e BatchEnqueued
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || json.Unmarshal([]byte(where), &e) != nil || n <= 0 {
			continue // not one batch.lua wrote
		}
		e.Tokens = n
		out = append(out, e)
	}
	return out, nil
}
