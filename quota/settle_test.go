package quota

import (
	"context"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// TestSettledChargesAreRespent: where each second's token allowance goes
// when the upstream charges actual usage and meterproxy charges an
// estimate settled at the end. Requests are estimated 36 tokens and use
// 22; each is settled the second after it was admitted, as a response
// ending then is. The credit lands in that second's window and is spent
// there, so the upstream receives the allowance (100 tokens a second) —
// clamped at zero, the credit was lost and it received 66.
func TestSettledChargesAreRespent(t *testing.T) {
	const estimate, used, seconds = 36, 22, 120
	l := store.Limits{AccountRPM: 1 << 30, BulkRPM: 1 << 29, InFlight: 1 << 30, BulkInFlight: 1 << 29, AccountTPM: 6000, BulkTPM: 3000}
	var now time.Time
	s := store.NewMemory(func() time.Time { return now })
	base := time.Unix(1_700_000_000, 0)
	var settling, upstream int64 // admitted last second; tokens the upstream was charged
	for sec := range seconds {
		now = base.Add(time.Duration(sec) * time.Second)
		waiters := make([]store.Queued, 20)
		for i := range waiters {
			waiters[i] = store.Queued{Cost: estimate}
		}
		req := store.TakeRequest{Want: store.PerClass{int64(len(waiters)), 0}, Limits: l}
		req.Waiters[classify.Interactive] = waiters
		req.Corrections[classify.Interactive] = settling * (used - estimate)
		res, err := s.Take(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		settling = res.Granted[classify.Interactive]
		upstream += settling * used
	}
	perSecond := float64(upstream) / seconds
	t.Logf("the upstream was charged %.1f tokens a second of the 100 allowed", perSecond)
	if perSecond < 95 || perSecond > 105 {
		t.Fatalf("the upstream was charged %.1f tokens a second; want the allowance, 100 (±5)", perSecond)
	}
}
