package gate

import (
	"context"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
)

// batchTTL is how long a store keeps a metered file and a batch's record:
// as long as a budget period's spend (budgetKeyTTL). A batch ends within
// its 24-hour window, but may be read (and so settled) much later.
const batchTTL = budgetKeyTTL

// BatchRecord is what the store keeps of a batch the proxy created: where
// its reservation is, what it reserved, and what it enqueued. It is kept
// by the batch's id until the batch ends (BatchStore.end).
type BatchRecord struct {
	// ID is the provider's batch id.
	ID string `json:"id"`
	// Keys are the budget periods its reservation is on: those of the
	// day it was created, where it settles whenever it ends.
	Keys []batchKey `json:"keys,omitempty"`
	// Reserved is what it reserved on each.
	Reserved price.Nanodollars `json:"reserved"`
	// Models are its requests' models: its usage is priced at the dearest.
	Models []string `json:"models,omitempty"`
	// Tokens are its input estimates, counted as enqueued at Enqueued.
	Tokens   int64         `json:"tokens"`
	Enqueued BatchEnqueued `json:"enqueued"`
}

// batchKey is a budget period as a batch record keeps it.
type batchKey struct {
	Budget string    `json:"budget"`
	Period string    `json:"period"`
	Resets time.Time `json:"resets"`
}

// budgetKeys are the record's periods as the budget store keys them.
func (r BatchRecord) budgetKeys() []budgetKey {
	keys := make([]budgetKey, len(r.Keys))
	for i, k := range r.Keys {
		keys[i] = budgetKey{Budget: k.Budget, Period: k.Period, Resets: k.Resets}
	}
	return keys
}

// BatchEnqueued is where a batch's tokens are enqueued: its account, pool
// and class as metrics label them; with Tokens, the tokens enqueued there.
type BatchEnqueued struct {
	Account string `json:"account"`
	Pool    string `json:"pool"`
	Class   string `json:"class"`
	Tokens  int64  `json:"tokens,omitempty"`
}

// BatchStore keeps what batches need beyond a reservation, for one
// replica or a fleet: the files the proxy metered, by the provider's file
// id, and the batches created, by batch id, with their reservations,
// which outlive the request and the replica that made them. Every method
// is safe for concurrent use.
type BatchStore interface {
	// PutFile keeps f as file id's.
	PutFile(ctx context.Context, id string, f price.BatchFile) error
	// File returns file id's, and false when the proxy never metered it
	// (or forgot it, batchTTL after).
	File(ctx context.Context, id string) (price.BatchFile, bool, error)
	// bind records rec and moves the reservation pending (a budget
	// store reservation id, held on rec.Keys) to the batch, where no
	// replica's death reaps it; a reservation already reaped is charged
	// in full, and stays so. It counts rec.Tokens as enqueued. A batch
	// bound already is left as it is.
	bind(ctx context.Context, rec BatchRecord, pending string) error
	// record returns batch id's record, and false when there is none
	// (never created through the proxy, or ended).
	record(ctx context.Context, id string) (BatchRecord, bool, error)
	// end ends rec's batch once: its reservation is replaced by cost on
	// each of its periods, its tokens leave the enqueued, and its record
	// goes. Ending a batch that is not recorded does nothing.
	end(ctx context.Context, rec BatchRecord, cost price.Nanodollars) error
	// enqueued returns the tokens enqueued, by where.
	enqueued(ctx context.Context) ([]BatchEnqueued, error)
}

// maxMemBatches bounds what an in-process batch store keeps of files and
// of batches each: past it the expired go, then any.
const maxMemBatches = 10_000

var _ BatchStore = (*MemoryBatches)(nil)

// MemoryBatches is the BatchStore of one replica, in process, beside its
// budgets (MemoryBudgets): lost with the process, so a batch created before a
// restart keeps its reservation (counted as spent by the spend file).
type MemoryBatches struct {
	budgets *MemoryBudgets
	now     func() time.Time

	mu       sync.Mutex
	files    map[string]memEntry[price.BatchFile]
	records  map[string]memEntry[BatchRecord]
	queued   map[BatchEnqueued]int64
	ttlAfter time.Duration
}

// memEntry is a value kept until expires.
type memEntry[T any] struct {
	v       T
	expires time.Time
}

// NewMemoryBatches returns the in-process batches, whose reservations
// settle on budgets.
func NewMemoryBatches(budgets *MemoryBudgets) *MemoryBatches {
	return &MemoryBatches{budgets: budgets, now: time.Now, files: map[string]memEntry[price.BatchFile]{},
		records: map[string]memEntry[BatchRecord]{}, queued: map[BatchEnqueued]int64{}, ttlAfter: batchTTL}
}

// keep puts v in m under id for ttl, making room first.
func keep[T any](m map[string]memEntry[T], id string, v T, now time.Time, ttl time.Duration) {
	if _, ok := m[id]; !ok && len(m) >= maxMemBatches {
		for k, e := range m {
			if e.expires.Before(now) {
				delete(m, k)
			}
		}
		for k := range m {
			if len(m) < maxMemBatches {
				break
			}
			delete(m, k)
		}
	}
	m[id] = memEntry[T]{v: v, expires: now.Add(ttl)}
}

// lookup is id's value in m, unless expired.
func lookup[T any](m map[string]memEntry[T], id string, now time.Time) (T, bool) {
	e, ok := m[id]
	if !ok || e.expires.Before(now) {
		var zero T
		return zero, false
	}
	return e.v, true
}

// PutFile implements BatchStore.
func (m *MemoryBatches) PutFile(_ context.Context, id string, f price.BatchFile) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep(m.files, id, f, m.now(), m.ttlAfter)
	return nil
}

// File implements BatchStore.
func (m *MemoryBatches) File(_ context.Context, id string) (price.BatchFile, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := lookup(m.files, id, m.now())
	return f, ok, nil
}

func (m *MemoryBatches) bind(_ context.Context, rec BatchRecord, pending string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := lookup(m.records, rec.ID, m.now()); ok {
		return nil
	}
	m.budgets.move(rec.budgetKeys(), pending, batchReservation(rec.ID))
	keep(m.records, rec.ID, rec, m.now(), m.ttlAfter)
	m.queued[rec.Enqueued] += rec.Tokens
	return nil
}

func (m *MemoryBatches) record(_ context.Context, id string) (BatchRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := lookup(m.records, id, m.now())
	return r, ok, nil
}

func (m *MemoryBatches) end(_ context.Context, rec BatchRecord, cost price.Nanodollars) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.records[rec.ID]; !ok {
		return nil
	}
	delete(m.records, rec.ID)
	m.budgets.settleHeld(rec.budgetKeys(), batchReservation(rec.ID), cost)
	if m.queued[rec.Enqueued] -= rec.Tokens; m.queued[rec.Enqueued] <= 0 {
		delete(m.queued, rec.Enqueued)
	}
	return nil
}

func (m *MemoryBatches) enqueued(context.Context) ([]BatchEnqueued, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]BatchEnqueued, 0, len(m.queued))
	for e, n := range m.queued {
		e.Tokens = n
		out = append(out, e)
	}
	return out, nil
}

// batchReservation is the reservation id a batch's reservation is held
// under once bound: "b:<batch id>", which no replica's death reaps.
func batchReservation(batchID string) string { return "b:" + batchID }
