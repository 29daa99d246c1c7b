package usage

import (
	"math"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// maxHeld is the most a Meter holds for one response, whatever the
// response: a JSON answer's window, or a stream's event window with the
// start of a line and an event name — 66,120 bytes. The proxy meters at
// most one response per request in flight, so the meters of a process
// hold at most its in-flight bound times maxHeld.
const maxHeld = windowSize + windowHead + maxFieldName + maxEventName

// Usage is the token count of one response, and the service tier that
// served it: what pricing needs. The zero value is no tokens, no tier.
type Usage struct {
	// Input and Output are tokens read and generated. Input counts every
	// prompt token, cached or not (for Anthropic the sum of input_tokens,
	// cache_creation_input_tokens and cache_read_input_tokens); Output
	// counts reasoning tokens too.
	Input, Output int64
	// Reasoning is the part of Output the model spent reasoning, as
	// reported: Chat Completions' completion_tokens_details and the
	// Responses API's output_tokens_details reasoning_tokens. Reasoning ≤
	// Output always, whatever the response says. It is 0 when the
	// response reports none apart — Anthropic Messages (thinking is
	// output, not reported apart) and Realtime — and when Output is the
	// estimate of a response that reported no output.
	Reasoning int64
	// CacheRead and CacheWrite are the parts of Input read from and
	// written to the provider's prompt cache, in tokens: OpenAI's
	// cached_tokens and cache_write_tokens (prompt_tokens_details,
	// input_tokens_details), Anthropic's cache_read_input_tokens and
	// cache_creation_input_tokens. CacheRead + CacheWrite ≤ Input always,
	// whatever the response says (read kept first). Both are 0 when Input
	// is the estimate.
	CacheRead, CacheWrite int64
	// AudioInput and AudioOutput are the parts of Input (not read from or
	// written to the cache) and of Output that are audio: a Realtime
	// response's input_token_details.audio_tokens less its cached audio,
	// and its output_token_details.audio_tokens. Each is within the
	// whole it is a part of; both are 0 when Input is the estimate.
	AudioInput, AudioOutput int64
	// Tier is the service tier the response says served it (its
	// service_tier; see tier.go), not the one the request asked for: 1 to
	// 32 bytes of [a-z0-9_-] such as "default", "flex", "priority" or
	// "standard", the last one the response named. It is "" when the
	// response named none, or named one outside that set. It is set on an
	// estimated usage too when the response named one.
	Tier string
	// Model is the model the response says served it (its model; see
	// model.go), not the one the request asked for: at most 128 bytes of
	// ASCII letters, digits and - _ . : / @ +, any other byte sent
	// replaced by '_', the last one the response named. It is "" when the
	// response named none. It is set on an estimated usage too when the
	// response named one.
	Model string
	// Estimated is true when the response carried no usage (or was cut
	// short) and the numbers are an estimate.
	Estimated bool
}

// Total returns Input + Output.
func (u Usage) Total() int64 { return u.Input + u.Output }

// mode is how a Meter reads its body.
type mode uint8

const (
	modeNone mode = iota // nothing to read: the API reports no usage
	modeJSON             // one JSON document, kept in a window
	modeSSE              // server-sent events, read as they pass
)

// Meter reads one response body as it passes: it is an io.Writer fed with
// a copy of every byte the client gets. It holds at most maxHeld bytes
// (about 65 KiB) per response: a JSON body whole up to 64 KiB, and of a
// longer one its last 64 KiB, where providers put the usage; of a stream,
// one event's data likewise (its first 512 bytes besides), the start of a
// line and an event name. A Meter is for one response, used by one
// goroutine at a time; make it with NewMeter. The zero Meter reads nothing
// and reports an estimate of 0.
type Meter struct {
	// read is the reader of the response's API (nil when mode is
	// modeNone), mode how the body is read.
	read          reader
	mode          mode
	inputEstimate int64

	sse  sseReader
	body window

	// got is what the response reported so far.
	got tally

	finished bool
	result   Usage
	// cut says the response Finish read ended before its end (Cut).
	cut bool
}

// NewMeter returns a Meter for one response of api. contentType is the
// response's Content-Type: text/event-stream is read as server-sent events,
// anything else as one JSON document. inputEstimate is the request's
// estimated input tokens (see EstimateInput), reported when the response
// has no usage. Responses of Other (and of a value no API constant
// names) are not read: their usage is always the estimate.
func NewMeter(api API, contentType string, inputEstimate int64) *Meter {
	m := &Meter{}
	m.Reset(api, contentType, inputEstimate)
	return m
}

// Reset makes m what NewMeter returns for the same arguments, in place:
// for a Meter held in a value of its user's rather than made apart.
func (m *Meter) Reset(api API, contentType string, inputEstimate int64) {
	*m = Meter{read: readerFor(api), inputEstimate: max(inputEstimate, 0)}
	switch {
	case m.read == nil:
		m.mode = modeNone
	case isEventStream(contentType):
		m.mode = modeSSE
	default:
		m.mode = modeJSON
	}
}

// isEventStream reports whether a Content-Type value is text/event-stream,
// with or without parameters.
func isEventStream(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}

// Write implements io.Writer, reading p as the next bytes of the body. It
// never fails, never retains p and uses bounded memory; bytes written after
// Finish are ignored.
func (m *Meter) Write(p []byte) (int, error) {
	if m.finished {
		return len(p), nil
	}
	switch m.mode {
	case modeSSE:
		m.sse.feed(p, m)
	case modeJSON:
		m.body.write(p)
	}
	return len(p), nil
}

// Finish is called once the body ended; complete says whether it ended
// cleanly (EOF, not an error). It returns the reported usage when the
// response carried it, and otherwise an estimate with Estimated set: Input
// is the input estimate, Output the bytes of text the response generated /
// 4 (rounded up): every kind of generated text counts — content, tool-call
// arguments, reasoning, refusals (see chatGenerated, responsesGenerated,
// anthropicGenerated) — in a stream's deltas or a whole answer's message.
//
// A stream is whole once its terminal event arrived ([DONE],
// response.completed|incomplete|failed, message_stop): its reported usage
// is the provider's last word, whatever comes after — a client that goes
// away right after the terminal event (Codex closes its connection after
// response.completed) while the upstream's end lags it leaves the stream
// ended before its EOF, and whole. A stream whose terminal event never
// arrived is Estimated even if it reported usage on the way, but the
// better numbers are kept: a reported input (such as Anthropic's
// message_start) replaces the input estimate, and Output is the larger of
// the reported output and the text estimate. A terminal event counts only
// whole, its blank line read (or, at a clean EOF, its last line). A JSON body over 64 KiB has its usage read
// from its last 64 KiB (see lastMember); without one there, or cut short,
// its Output is estimated from its size. A JSON body cut short is
// Estimated, its usage, if any came, not read. The cache parts go with a
// reported input (0 with the estimate), the reasoning part with a
// reported output, and the service tier and the model are the last the
// response named, estimated or not (see Usage). Later calls return
// the same Usage. Cut then says whether the response was cut short.
func (m *Meter) Finish(complete bool) Usage {
	if m.finished {
		return m.result
	}
	m.finished = true
	switch m.mode {
	case modeSSE:
		if complete {
			m.sse.end(m)
		}
		m.result = m.streamUsage()
		m.cut = !m.got.terminal
	case modeJSON:
		if body, whole := m.body.whole(); whole {
			m.read.body(&m.got, body)
		} else {
			m.read.tail(&m.got, &m.body)
		}
		m.result = m.bodyUsage(complete)
		m.cut = !complete
	default:
		m.result = m.estimate(0)
	}
	m.body, m.sse = window{}, sseReader{}
	return m.result
}

// Cut reports whether the response Finish read ended before its end: a
// stream whose terminal event never came, a JSON body cut short. Its usage is then Estimated, and what the provider
// billed may be far above the estimate (reasoning it never showed, a
// generation that went on after the cut). A response without usage that
// ended whole is Estimated but not cut. False before Finish, and for an
// API whose responses are not read (Other).
func (m *Meter) Cut() bool { return m.cut }

// Terminal reports whether the stream's terminal event has been read
// whole: from then on its usage is what it reported (Finish). False for
// anything but a stream.
func (m *Meter) Terminal() bool { return m.got.terminal }

// streamUsage is the usage of a stream that ended: what it reported when
// its terminal event arrived and it reported both its input and its output
// (every streaming API reports both), else the estimate with the better
// numbers kept — a stream that reported half its usage is not whole.
func (m *Meter) streamUsage() Usage {
	got := &m.got
	if got.terminal && got.haveIn && got.haveOut {
		return got.reported()
	}
	u := m.estimate(ceilQuarter(got.text))
	if got.haveIn {
		u.Input = got.in
		c := got.cache.within(got.in)
		u.CacheRead, u.CacheWrite = c.read, c.write
	}
	if got.haveOut {
		u.Output = max(u.Output, got.out)
		u.Reasoning = min(got.reasoning, u.Output)
	}
	return u
}

// bodyUsage is the usage of a JSON body that ended: what it reported when
// it ended cleanly, else the estimate.
func (m *Meter) bodyUsage(complete bool) Usage {
	if complete && (m.got.haveIn || m.got.haveOut) {
		return m.got.reported()
	}
	return m.estimate(ceilQuarter(m.got.text))
}

// estimate is the estimated usage of output tokens: the input estimate,
// nothing cached, no reasoning apart, the tier and model the response
// named if it named them.
func (m *Meter) estimate(output int64) Usage {
	return Usage{Input: m.inputEstimate, Output: output, Tier: m.got.tier, Model: m.got.model, Estimated: true}
}

// event implements eventHandler: one SSE event of the stream, read by
// the API's reader whole when it was kept whole, else from its start and
// end (reader.longEvent).
func (m *Meter) event(name []byte, d *window) {
	if data, whole := d.whole(); whole {
		m.read.event(&m.got, name, data)
	} else {
		m.read.longEvent(&m.got, name, d)
	}
}

// maxCount bounds a reported count: far above any real one, low enough that
// sums of a few never overflow.
const maxCount = 1 << 48

// count returns a reported token count, a JSON number, within [0, maxCount].
// Provider counts are integers; a fraction is dropped.
func count(v gjson.Result) int64 {
	f := v.Float()
	switch {
	case f <= 0 || math.IsNaN(f): // no provider sends these
		return 0
	case f >= maxCount:
		return maxCount
	}
	return int64(f)
}

// view returns b as a string without copying, for gjson look-ups. The string
// must not be kept past the call it is made for: b is a reused buffer. The
// look-ups reduce their results to numbers and lengths before returning.
func view(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b)) //nolint:gosec // G103: read-only view of a buffer that outlives every use; see above.
}
