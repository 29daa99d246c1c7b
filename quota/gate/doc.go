// Package gate holds the caller gates a request passes before it waits
// for its pool: its caller's cap (CapGate: callers[].max_in_flight and
// requests_per_minute, fleet-wide) and its caller's and class's spend
// budgets (BudgetGate: callers[].budget, classes.<class>.budget), each a
// Gate that Chain passes in order, each with its stores — in process and
// in Redis (cap.lua, budget.lua, batch.lua), behind the windows store's
// breaker (package quota/store's Failover) for the caps; budgets fail
// closed.
//
// A Gate's Start takes a Request (who sends it, its class, its worst-case
// cost) and returns a Pass, released when the request ends and settled
// with what it cost. BudgetGate also reserves batches at creation
// (ReserveBatch) and settles them when the provider ends them (EndBatch),
// and charges what nobody could hold (ChargePass).
//
// The refusals every wait in quota ends with are defined here, the lowest
// package that returns them: RefusedError (ErrQueueFull, ErrWaitTimeout,
// ErrBudgetHeld), ErrClosed, BudgetExceededError, UnpricedModelError,
// UnmeteredAPIError; and Wait, what a request waited for (the HeldBy*
// names). Package quota (the core) builds the gates and returns their
// errors as they are.
//
// The package imports package quota/store and the leaves (quota/price),
// never the core.
package gate
