package gate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// BatchRequest is a batch about to be created, as the proxy metered it.
type BatchRequest struct {
	Caller string
	Class  classify.Class
	// Account and Pool are where its requests go, as quota.Lease.Account and
	// PoolAt name them.
	Account, Pool string
	// File is its requests as the proxy metered them; nil when the proxy
	// never saw them (an input file uploaded around it).
	File *price.BatchFile
}

// BatchUnmeteredError refuses a budgeted caller's batch whose requests
// the proxy could not meter: its budget cannot hold what it may cost.
type BatchUnmeteredError struct {
	// Budget names the budget that refused it.
	Budget string
	// Why says what the proxy could not meter; "" when it never saw the
	// batch's input file.
	Why string
}

// Error implements error.
func (e *BatchUnmeteredError) Error() string {
	if e.Why == "" {
		return fmt.Sprintf("quota: budget %s cannot hold a batch whose input file the proxy never metered", e.Budget)
	}
	return fmt.Sprintf("quota: budget %s cannot hold a batch the proxy could not meter: %s", e.Budget, e.Why)
}

// BatchHold is a batch's reservation while its creation is sent: Bind
// gives it to the batch the provider created, Release gives it back when
// none was. Only the first of them counts. A nil *BatchHold holds nothing.
type BatchHold struct {
	g *BudgetGate
	// id is the reservation's id in the budget store, "" when nothing was
	// reserved; keys, where it is held.
	id   string
	keys []budgetKey
	rec  BatchRecord
	once sync.Once
}

// Bind records the batch the provider created as batchID, its reservation
// moved to it (it outlives the request and this replica) and its input
// tokens counted as enqueued. An empty batchID says a batch may have been
// created but its id is unknown (an answer that could not be read, or
// none): its worst case is spent, as nothing could ever settle it. The
// store hears of it from the budget loop.
func (h *BatchHold) Bind(batchID string) {
	if h == nil {
		return
	}
	if batchID == "" {
		h.once.Do(func() {
			if h.id != "" {
				h.g.enqueue(budgetSettle{keys: h.keys, id: h.id, cost: h.rec.Reserved})
			}
		})
		return
	}
	h.once.Do(func() {
		rec, id := h.rec, h.id
		rec.ID = batchID
		h.g.enqueue(budgetSettle{job: func(ctx context.Context) error {
			if err := h.g.batches.bind(ctx, rec, id); err != nil {
				return err
			}
			if id != "" {
				h.g.held.Add(-1) // no longer this replica's: no heartbeat keeps it
			}
			return nil
		}})
	})
}

// Release gives the reservation back: the provider created no batch.
func (h *BatchHold) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		if h.id != "" {
			h.g.enqueue(budgetSettle{keys: h.keys, id: h.id})
		}
	})
}

// ReserveBatch reserves cost, a batch's worst case, on the budgets of r's
// caller and class, as Start does a request's; rec is the batch's record
// but for its id and reservation. Without budgets nothing is reserved,
// and the hold only records the batch.
func (g *BudgetGate) ReserveBatch(ctx context.Context, r Request, until time.Time, rec BatchRecord) (*BatchHold, error) {
	set := g.budgets.Load()
	bs := set.of(r.Caller, r.Class)
	h := &BatchHold{g: g, rec: rec}
	if len(bs) == 0 || r.Cost == 0 {
		return h, nil
	}
	keys := periods(bs, g.now())
	id := g.nextID()
	if _, err := g.reserve(ctx, set, keys, id, r, until); err != nil {
		return nil, err
	}
	if l, ok := g.store.(*LocalBudgets); ok && l.heldLocally(id) {
		// A batch's reservation outlives its request in the store's
		// batch record, which a local share cannot give it: refused, as
		// under budgets.on_store_error: closed.
		g.enqueue(budgetSettle{keys: keys, id: id})
		return nil, fmt.Errorf("%w: a batch cannot be reserved on a replica's local share while the store fails", store.ErrStoreUnavailable)
	}
	h.id, h.keys, h.rec.Reserved = id, keys, r.Cost
	for _, k := range keys {
		h.rec.Keys = append(h.rec.Keys, batchKey{Budget: k.Budget, Period: k.Period, Resets: k.Resets})
	}
	return h, nil
}

// Budgeted reports whether any budget is configured.
func (g *BudgetGate) Budgeted() bool { return len(g.budgets.Load().all()) > 0 }

// BudgetedBy returns the budgets of caller and class.
func (g *BudgetGate) BudgetedBy(caller string, class classify.Class) []NamedBudget {
	return g.budgets.Load().of(caller, class)
}

// EndBatch hands the loop the end of batch id: its record read, its
// reservation replaced by what cost says it cost (given its record), once.
func (g *BudgetGate) EndBatch(id string, cost func(BatchRecord) price.Nanodollars) {
	g.enqueue(budgetSettle{job: func(ctx context.Context) error {
		rec, ok, err := g.batches.record(ctx, id)
		if err != nil || !ok {
			return err // not recorded: created around the proxy, or ended already
		}
		return g.batches.end(ctx, rec, cost(rec))
	}})
}

// refreshEnqueued reads the enqueued batch tokens into enqueuedSeen.
func (g *BudgetGate) refreshEnqueued(ctx context.Context) {
	if g.batches == nil {
		return
	}
	q, err := g.batches.enqueued(ctx)
	if err != nil {
		return // the last view stands
	}
	g.mu.Lock()
	g.enqueuedSeen = q
	g.mu.Unlock()
}

// Enqueued returns the batch tokens enqueued, by where, as the loop last
// read them (fleet-wide with Redis). Safe for concurrent use.
func (g *BudgetGate) Enqueued() []BatchEnqueued {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]BatchEnqueued(nil), g.enqueuedSeen...)
}
