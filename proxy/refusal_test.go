package proxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// TestReasonOf: every error admission returns maps to one refusal — the
// same for the handler's answer and for shadow mode's record — or, for a
// context that ended, to no decision (the client left; shadow mode's
// unfinished).
func TestReasonOf(t *testing.T) {
	refused := func(reason error, caller string) error {
		return fmt.Errorf("wrapped: %w", &gate.RefusedError{Class: classify.Bulk, Reason: reason, RetryAfter: 3 * time.Second, Caller: caller})
	}
	tests := []struct {
		name     string
		err      error
		status   int
		reason   string
		retry    time.Duration
		decided  bool
		shadow   string
		mentions string
	}{
		{"charge too large", &quota.ChargeTooLargeError{Tokens: 9000, Limit: 100, Key: "account.max_request_tokens", Pool: "default"},
			400, reasonChargeTooLarge, 0, true, shadowTooLarge, "charged 9000 tokens, more than the 100 one request may be charged in pool default (account.max_request_tokens)"},
		{"queue full", refused(gate.ErrQueueFull, ""), 429, reasonQueueFull, 3 * time.Second, true, shadowQueueFull, "the bulk queue is full"},
		{"max wait", refused(gate.ErrWaitTimeout, ""), 429, reasonMaxWait, 3 * time.Second, true, shadowMaxWait, "no bulk capacity within the class's max_wait"},
		{"caller cap, waited", refused(gate.ErrWaitTimeout, "batch"), 429, reasonCallerCap, 3 * time.Second, true, shadowCallerCap, "own cap"},
		{"caller cap, queue full", refused(gate.ErrQueueFull, "batch"), 429, reasonCallerCap, 3 * time.Second, true, shadowCallerCap, "already wait for its own cap"},
		{"store unavailable", fmt.Errorf("x: %w", store.ErrStoreUnavailable), 503, reasonStoreUnavailable, time.Second, false, shadowOther, "store.on_error closed"},
		{"budget exceeded", fmt.Errorf("x: %w", &gate.BudgetExceededError{Budget: "caller:import", Limit: 200e9, Spent: 199_990_000_000, Cost: 20_000_000,
			Resets: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}), 429, reasonBudgetExceeded, 0, true, shadowBudget,
			"budget caller:import is spent: $199.99 of $200.00 this period, and this request may cost up to $0.02; it resets at 2027-01-01T00:00:00Z"},
		{"budget held", refused(gate.ErrBudgetHeld, ""), 429, reasonMaxWait, 3 * time.Second, true, shadowMaxWait, "held by requests in flight"},
		{"unpriced model", &gate.UnpricedModelError{Budget: "class:bulk", Model: "gpt-9"}, 400, reasonUnpricedModel, 0, true, shadowUnpriced,
			`budget class:bulk cannot price model "gpt-9"`},
		{"unpriced: no model", &gate.UnpricedModelError{Budget: "caller:import"}, 400, reasonUnpricedModel, 0, true, shadowUnpriced,
			"budget caller:import cannot price this request: it names no model"},
		{"unmetered API, caller", &gate.UnmeteredAPIError{Budget: "caller:import"}, 400, reasonUnmeteredAPI, 0, true, shadowUnmetered,
			"budget caller:import cannot price POST /v1/images/generations: meterproxy reads no usage from this API's answers. " +
				"budget.unpriced_apis: worst_case on the budget (callers[].budget.unpriced_apis of caller import) lets such requests through"},
		{"unmetered API, class", &gate.UnmeteredAPIError{Budget: "class:bulk"}, 400, reasonUnmeteredAPI, 0, true, shadowUnmetered,
			"(classes.bulk.budget.unpriced_apis)"},
		{"pool removed", quota.ErrPoolRemoved, 503, reasonPoolRemoved, time.Second, false, shadowOther, "reload removed the pool"},
		{"closed", gate.ErrClosed, 503, reasonShuttingDown, time.Second, false, shadowUnfinished, "shutting down"},
		{"context", context.Canceled, 503, reasonShuttingDown, time.Second, false, shadowUnfinished, "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, decided := reasonOf(tt.err, classify.Bulk, apiName{"POST", "/v1/images/generations"})
			// The SDKs retry what is not a 400 — but a spent budget, which
			// returns only when its period resets.
			retry := tt.status != http.StatusBadRequest && tt.reason != reasonBudgetExceeded
			if f.status != tt.status || f.reason != tt.reason || f.retryAfter != tt.retry || decided != tt.decided ||
				f.retry != retry || !strings.Contains(f.message, tt.mentions) {
				t.Errorf("reasonOf = %+v decided %v, want %d %s retry after %v decided %v mentioning %q",
					f, decided, tt.status, tt.reason, tt.retry, tt.decided, tt.mentions)
			}
			kinds := map[int]string{400: "invalid_request_error", 429: "rate_limit_error", 503: "api_error"}
			if tt.reason == reasonBudgetExceeded {
				kinds[429] = "insufficient_quota" // OpenAI's own word for a spent quota
			}
			if f.kind != kinds[f.status] {
				t.Errorf("kind %s, want %s", f.kind, kinds[f.status])
			}
			if got := shadowOutcome(nil, tt.err, classify.Bulk); got != tt.shadow {
				t.Errorf("shadow outcome %s, want %s", got, tt.shadow)
			}
			if !slices.Contains(refusalCodes, reasonStatus{f.reason, f.status}) || !slices.Contains(shadowOutcomes, tt.shadow) {
				t.Errorf("%s or %s is not a pre-initialised label", f.reason, tt.shadow)
			}
		})
	}
}
