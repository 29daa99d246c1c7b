// Package adaptive is the controller of an adaptive in-flight bound: a
// plain value (State) that Limits.Next steps with one interval's Sample,
// returning the new State and the Decision it took. It reads no clock,
// keeps no goroutine and imports nothing of quota, so the same state and
// sample always give the same answer; quota keeps the state in its store,
// feeds it the samples its leases saw and enforces the bound.
//
// The bound grows ×2 from the floor while work a second grows with it
// (slow start), settles at the knee, then probes a step above and below,
// keeping a step that pays; 429s, 5xx and timeouts back it off, and a rise
// of latency per unit of work with no more work done cuts it to where the
// knee moved. controller.go holds the rules, cut.go the two that bring
// the bound down, sample.go the measurement and its judgements, mix.go why
// a measurement with token counts is judged in two units.
package adaptive
