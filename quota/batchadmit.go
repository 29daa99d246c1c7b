package quota

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
)

// batches is the Admitter's batch desk, its methods the Admitter's: the
// input files the proxy metered, and the batches' reservations on the
// spend budgets, made at creation and settled when the provider ends
// them. It holds the budget gate every admission passes too.
type batches struct {
	files   gate.BatchStore
	budgets *gate.BudgetGate
	// config is the Admitter's configuration in force.
	config *atomic.Pointer[Config]
}

// PutBatchFile keeps what the proxy metered of an input file as the
// provider's file id: the file a batch may later name. Nothing is kept
// for an empty id.
func (b *batches) PutBatchFile(ctx context.Context, id string, f price.BatchFile) error {
	if id == "" {
		return nil
	}
	return b.files.PutFile(ctx, id, f)
}

// BatchFile returns what the proxy metered of input file id, and false
// when it never saw it (or forgot it, 35 days after).
func (b *batches) BatchFile(ctx context.Context, id string) (price.BatchFile, bool, error) {
	return b.files.File(ctx, id)
}

// Budgeted reports whether a request of caller and class draws on any
// spend budget.
func (b *batches) Budgeted(caller string, class classify.Class) bool {
	return len(b.budgets.BudgetedBy(caller, class)) > 0
}

// ReserveBatch reserves the worst case of a batch about to be created on
// its caller's and class's budgets, at the batch prices in force (each
// model's requests: their input estimates at the dearest input price,
// their output caps, or max_output for each that sets none, at the output
// price), and returns its hold, which the caller must Bind to the batch
// the provider created or Release. The batch's input tokens count as
// enqueued at its pool once bound. It refuses as Admit's budgets do — a
// *gate.BudgetExceededError, a *gate.RefusedError (max_wait or the queue),
// *gate.UnpricedModelError, store.ErrStoreUnavailable — and with a
// *gate.BatchUnmeteredError a budgeted batch whose requests the proxy did not
// meter. A batch of no budget whose file the proxy never saw is recorded
// nowhere: its hold is nil.
func (b *batches) ReserveBatch(ctx context.Context, req gate.BatchRequest) (*gate.BatchHold, error) {
	cfg := b.config.Load()
	bs := b.budgets.BudgetedBy(req.Caller, req.Class)
	if req.File == nil || req.File.Unmetered != "" {
		if len(bs) == 0 {
			return nil, nil
		}
		e := &gate.BatchUnmeteredError{Budget: bs[0].Name}
		if req.File != nil {
			e.Why = req.File.Unmetered
		}
		return nil, e
	}
	l := LabelsOf(req.Account, req.Pool)
	rec := gate.BatchRecord{Tokens: req.File.InputTokens(), Enqueued: gate.BatchEnqueued{Account: l.Account, Pool: l.Pool, Class: req.Class.String()}}
	var cost price.Nanodollars
	for _, m := range req.File.Models {
		rec.Models = append(rec.Models, m.Model)
		p := cfg.Prices.For(m.Model, false)
		if p == nil {
			if err := gate.Unpriced(bs, m.Model); err != nil {
				return nil, err
			}
			continue
		}
		cost = cost.Plus(p.BatchWorst(m))
	}
	r := gate.Request{Caller: req.Caller, Class: req.Class, Cost: cost, Priced: true, Generates: true}
	return b.budgets.ReserveBatch(ctx, r, time.Now().Add(cfg.Classes.maxWait(req.Class)), rec)
}

// EndBatch settles batch id, which the provider reports ended: its
// reservation is replaced by u priced at the batch prices in force of
// the dearest of its models — or by nothing when u is nil (the batch
// failed, expired or was cancelled before any request ran) — once, on
// the budget periods it was reserved in, and its tokens leave the
// enqueued. A batch not created through the proxy, or ended already, is
// left alone. The store hears of it from the budget loop.
func (b *batches) EndBatch(id string, u *price.Usage) {
	if id == "" {
		return
	}
	b.budgets.EndBatch(id, func(rec gate.BatchRecord) price.Nanodollars {
		if u == nil {
			return 0
		}
		bu := *u
		bu.Tier = price.TierBatch
		cfg := b.config.Load()
		cost, priced := price.Nanodollars(0), false
		for _, m := range rec.Models {
			if p := cfg.Prices.For(m, false); p != nil {
				cost, priced = max(cost, p.Cost(bu)), true
			}
		}
		if !priced {
			return rec.Reserved // its prices are gone: what it reserved, never less
		}
		return cost
	})
}

// BatchEnqueued returns the batch input tokens enqueued — of batches the
// proxy created and has not seen end — by account, pool and class, as the
// budget loop last read them (fleet-wide with Redis).
func (b *batches) BatchEnqueued() []gate.BatchEnqueued { return b.budgets.Enqueued() }
