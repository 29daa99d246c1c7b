package quota

// adaptivePhase is what the controller is doing with the bound.
type adaptivePhase string

// The phases: growing ×2 from the floor, holding at the accepted bound, or
// trying a step above or below it.
const (
	phaseGrow  adaptivePhase = "slow_start"
	phaseHold  adaptivePhase = "hold"
	phaseUp    adaptivePhase = "probe_up"
	phaseDown  adaptivePhase = "probe_down"
	phaseStart adaptivePhase = "" // the zero state: nothing measured
)

// adaptiveAction names a decision, a closed set for metrics and logs.
type adaptiveAction string

// The decisions.
const (
	actGrow        adaptiveAction = "grow"         // slow start doubled the bound
	actSettle      adaptiveAction = "settle"       // growth stopped; bound at the knee
	actProbeUp     adaptiveAction = "probe_up"     // trying (or kept) a step up
	actProbeDown   adaptiveAction = "probe_down"   // trying (or kept) a step down
	actRevert      adaptiveAction = "revert"       // a probe did not pay; back to the accepted bound
	actBackOff     adaptiveAction = "back_off"     // 429s, 5xx or timeouts
	actLatencyRise adaptiveAction = "latency_rise" // latency per work rose with no more work
	actHold        adaptiveAction = "hold"         // no change
)

// adaptiveDecision is what one step did and why: the action for a metric
// label, the move, a static reason for the log, and the measurement judged
// (zero when none was).
type adaptiveDecision struct {
	Action adaptiveAction `json:"action"`
	From   int            `json:"from"`
	To     int            `json:"to"`
	Why    string         `json:"why"`
	Judged adaptiveRate   `json:"judged"`
}

// large says the move is worth an info log: a quarter of the bound or more.
func (d adaptiveDecision) large() bool {
	return d.To != d.From && 4*abs(d.To-d.From) >= d.From
}

// abs is |n|.
func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
