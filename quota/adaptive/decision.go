package adaptive

// Phase is what the controller is doing with the bound.
type Phase string

// The phases: growing ×2 from the floor, holding at the accepted bound, or
// trying a step above or below it.
const (
	PhaseGrow  Phase = "slow_start"
	PhaseHold  Phase = "hold"
	PhaseUp    Phase = "probe_up"
	PhaseDown  Phase = "probe_down"
	PhaseStart Phase = "" // the zero state: nothing measured
)

// Action names a decision, a closed set for metrics and logs.
type Action string

// The decisions.
const (
	ActGrow        Action = "grow"         // slow start doubled the bound
	ActSettle      Action = "settle"       // growth stopped; bound at the knee
	ActProbeUp     Action = "probe_up"     // trying (or kept) a step up
	ActProbeDown   Action = "probe_down"   // trying (or kept) a step down
	ActRevert      Action = "revert"       // a probe did not pay; back to the accepted bound
	ActBackOff     Action = "back_off"     // 429s, 5xx or timeouts
	ActLatencyRise Action = "latency_rise" // latency per work rose with no more work
	ActHold        Action = "hold"         // no change
)

// Decision is what one step did and why: the action for a metric
// label, the move, a static reason for the log, and the measurement judged
// (zero when none was).
type Decision struct {
	Action Action `json:"action"`
	From   int    `json:"from"`
	To     int    `json:"to"`
	Why    string `json:"why"`
	Judged Rate   `json:"judged"`
}

// Large says the move is worth an info log: a quarter of the bound or more.
func (d Decision) Large() bool {
	return d.To != d.From && 4*abs(d.To-d.From) >= d.From
}

// abs is |n|.
func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Actions are the decisions' closed set, for a metric's label.
var Actions = []Action{ActGrow, ActSettle, ActProbeUp, ActProbeDown, ActRevert, ActBackOff, ActLatencyRise, ActHold}
