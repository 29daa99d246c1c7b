package gate

import (
	"context"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// batchStores are a budget store and its batch store, in process and on
// Redis (as replica "r1", with another replica's budget store, r2, on a
// clock they share: Redis only, where a silent replica's reservations
// are reaped).
func batchStores(t *testing.T) map[string]func() (BudgetStore, BatchStore, BudgetStore, *time.Time) {
	return map[string]func() (BudgetStore, BatchStore, BudgetStore, *time.Time){
		"in-process": func() (BudgetStore, BatchStore, BudgetStore, *time.Time) {
			m := NewMemoryBudgets()
			return m, NewMemoryBatches(m), nil, nil
		},
		"redis": func() (BudgetStore, BatchStore, BudgetStore, *time.Time) {
			srv, prefix := redistest.Start(t), redistest.Prefix(t)
			now := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
			r1, r2 := newTestRedisBudgets(t, srv, prefix, "r1"), newTestRedisBudgets(t, srv, prefix, "r2")
			r1.clock, r2.clock = func() time.Time { return now }, func() time.Time { return now }
			return r1, NewRedisBatches(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second}, "r1"), r2, &now
		},
	}
}

// TestBatchStore: a batch's reservation, bound to its id, is neither
// reaped with the replica that made it nor settled twice: ending it
// replaces it by its cost in the period it was reserved in (December's,
// however late it ends), once; binding twice binds once; the enqueued
// tokens come and go with it; a file is kept by its id.
func TestBatchStore(t *testing.T) {
	dec := []budgetKey{{Budget: "caller:import", Period: "2026-12", Limit: 100, Resets: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}}
	where := BatchEnqueued{Account: "default", Pool: "default", Class: "bulk"}
	for name, open := range batchStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			budgets, batches, other, now := open()
			if _, ok, err := batches.File(ctx, "file-1"); ok || err != nil {
				t.Fatalf("a file never kept: %v %v", ok, err)
			}
			f := price.BatchFile{Models: []price.BatchModel{{Model: "gpt-4o", Lines: 2, Input: 40, Output: 10, Uncapped: 1}}}
			if err := batches.PutFile(ctx, "file-1", f); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := batches.File(ctx, "file-1"); !ok || err != nil || got.Models[0] != f.Models[0] {
				t.Fatalf("file-1: %+v %v %v", got, ok, err)
			}
			if ans, err := budgets.reserve(ctx, dec, "7", 80); err != nil || ans.Outcome != budgetReserved {
				t.Fatalf("reserve: %+v %v", ans, err)
			}
			rec := BatchRecord{ID: "batch_1", Keys: []batchKey{{Budget: dec[0].Budget, Period: dec[0].Period, Resets: dec[0].Resets}},
				Reserved: 80, Models: []string{"gpt-4o"}, Tokens: 40, Enqueued: where}
			for range 2 {
				if err := batches.bind(ctx, rec, "7"); err != nil {
					t.Fatal(err)
				}
			}
			checkEnqueued(t, batches, 40)
			spent := price.Nanodollars(25)
			if other != nil {
				// r1 falls silent: its request's reservation is reaped
				// (charged in full), its batch's is not.
				if _, err := budgets.reserve(ctx, dec, "9", 10); err != nil {
					t.Fatal(err)
				}
				*now = now.Add(time.Hour)
				if ans, err := other.reserve(ctx, dec, "1", 30); err != nil || ans.Outcome != budgetWait || ans.Use[0] != (budgetUse{Spent: 10, Reserved: 80}) {
					t.Fatalf("beside a batch's reservation, its replica silent: %+v %v, want wait with the request's 10 reaped, the batch's 80 reserved", ans, err)
				}
				spent += 10
			}
			got, ok, err := batches.record(ctx, "batch_1")
			if err != nil || !ok || got.Reserved != 80 || got.Keys[0].Period != "2026-12" {
				t.Fatalf("record: %+v %v %v", got, ok, err)
			}
			for range 2 {
				if err := batches.end(ctx, got, 25); err != nil {
					t.Fatal(err)
				}
			}
			if use, err := budgets.read(ctx, dec); err != nil || use[0] != (budgetUse{Spent: spent}) {
				t.Errorf("December after the batch ended in January: %+v %v, want its 25 spent once (%d in all), nothing reserved", use, err, spent)
			}
			if _, ok, _ := batches.record(ctx, "batch_1"); ok {
				t.Error("the record outlived the batch's end")
			}
			checkEnqueued(t, batches, 0)
		})
	}
}

// checkEnqueued checks the batch tokens enqueued: want at the one place,
// or nothing.
func checkEnqueued(t *testing.T, s BatchStore, want int64) {
	t.Helper()
	q, err := s.enqueued(context.Background())
	var got int64
	for _, e := range q {
		got += e.Tokens
	}
	if err != nil || got != want || (want == 0) != (len(q) == 0) {
		t.Errorf("enqueued %+v (%v), want %d tokens", q, err, want)
	}
}

// TestRedisBatchBindReaped: a request's reservation reaped before its
// batch was bound (its replica fell silent while the provider answered)
// was charged in full; the batch binds what the reaper kept of it, and
// its end refunds what it held beyond its cost, once however often it is
// tried.
func TestRedisBatchBindReaped(t *testing.T) {
	budgets, batches, other, now := batchStores(t)["redis"]()
	ctx := context.Background()
	dec := []budgetKey{{Budget: "caller:import", Period: "2026-12", Limit: 100, Resets: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if _, err := budgets.reserve(ctx, dec, "5", 80); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Hour)
	if ans, err := other.reserve(ctx, dec, "1", 30); err != nil || ans.Outcome != budgetExceeded || ans.Use[0].Spent != 80 {
		t.Fatalf("after r1 fell silent: %+v %v, want its 80 reaped as spent", ans, err)
	}
	rec := BatchRecord{ID: "batch_2", Keys: []batchKey{{Budget: dec[0].Budget, Period: dec[0].Period, Resets: dec[0].Resets}}, Reserved: 80, Tokens: 9,
		Enqueued: BatchEnqueued{Account: "default", Pool: "default", Class: "bulk"}}
	if err := batches.bind(ctx, rec, "5"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // an end repeated (its answer lost) refunds once
		if err := batches.end(ctx, rec, 10); err != nil {
			t.Fatal(err)
		}
	}
	if use, err := budgets.read(ctx, dec); err != nil || use[0] != (budgetUse{Spent: 10}) {
		t.Errorf("after the batch ended: %+v %v, want the 80 reaped refunded to its cost of 10, once", use, err)
	}
	checkEnqueued(t, batches, 0)
}
