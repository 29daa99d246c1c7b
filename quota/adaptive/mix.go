package adaptive

// A request's latency has a part per request (its prompt, the queue of a
// batch, the network) and a part per output token, and neither latency per
// token nor latency per completion is the same for every mix of requests:
// twenty callers asking max_tokens: 1 beside sixty ordinary ones raise
// latency per token by a third while the server does as much as before,
// and callers asking for long answers raise latency per completion. In
// any model of the server's work — a·completions + b·tokens, a and b ≥ 0 —
// work a second is a positive combination of completions a second and
// tokens a second, and so is its inverse latency per work: 1/latency per
// work = a/latency per completion + b/latency per token. Work fell, or
// latency per work rose, in every such model exactly when it did in both
// units. So a measurement with token counts is judged in both where a
// judgement would take work away — a cut (rose), a step down kept
// (relieved), the queue that sends a probe below (queued) — and in tokens
// alone where it would give more (a step up, slow start), which a cut
// corrects.

// roseBy is the factor latency per work of r rose by over the references
// (latency per token ref and per completion refDone, 0 when unknown):
// the smaller of the two with token counts, latency per completion's
// without.
func (r Rate) roseBy(ref, refDone float64) float64 {
	rise := r.Latency / ref
	if r.Tokens && refDone > 0 && r.PerDone > 0 {
		rise = min(rise, r.PerDone/refDone)
	}
	return rise
}

// above says r did more work a second than f × base's in either unit —
// so not less in every model.
func (r Rate) above(base Rate, f float64) bool {
	return r.Work > base.Work*f || r.Tokens && base.Done > 0 && r.Done > base.Done*f
}

// mixRelieved is relieved's second unit: with token counts, work a second
// in completions stayed at keepShare of base's too, and latency per
// completion fell below want × base's too.
func (r Rate) mixRelieved(base Rate, want float64) bool {
	if !r.Tokens || base.Done <= 0 || base.PerDone <= 0 {
		return true
	}
	return r.Done >= keepShare*base.Done && r.PerDone <= base.PerDone*want
}

// blend moves r halfway (ewmaWeight) to got, in both units: the baseline
// at the accepted bound.
func (r Rate) blend(got Rate) Rate {
	r.Work += ewmaWeight * (got.Work - r.Work)
	r.Latency += ewmaWeight * (got.Latency - r.Latency)
	r.Done += ewmaWeight * (got.Done - r.Done)
	r.PerDone += ewmaWeight * (got.PerDone - r.PerDone)
	r.Tokens = r.Tokens && got.Tokens
	return r
}

// towardRef moves the references halfway to got, in both units, starting
// them at got when unset.
func (m memory) towardRef(got Rate) memory {
	if m.Ref == 0 {
		m.Ref = got.Latency
	}
	if m.RefDone == 0 {
		m.RefDone = got.PerDone
	}
	m.Ref += ewmaWeight * (got.Latency - m.Ref)
	m.RefDone += ewmaWeight * (got.PerDone - m.RefDone)
	return m
}

// queuedMix says latency per completion is above the least seen too (or
// is not told apart from latency per work): with queued, requests queue
// in the server in every model.
func (m memory) queuedMix() bool {
	return !m.Base.Tokens || m.MinDone <= 0 || m.Base.PerDone >= queueRise*m.MinDone
}

// noteLeast keeps the least latency per work, in both units, seen at an
// accepted bound.
func (m memory) noteLeast() memory {
	if m.MinLatency == 0 || m.Base.Latency < m.MinLatency {
		m.MinLatency = m.Base.Latency
	}
	if m.MinDone == 0 || m.Base.PerDone > 0 && m.Base.PerDone < m.MinDone {
		m.MinDone = m.Base.PerDone
	}
	return m
}
