package usage

import "bytes"

// sseData and sseEnd frame one event's data as a server-sent event.
var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	space   = []byte(" ")
)

// WriteEvent reads data as one whole event of a stream whose transport
// frames its events itself — a WebSocket message of the Responses API,
// whose events are those of its HTTP stream without the SSE framing —
// exactly as Write reads the same event arriving as server-sent events:
// its type from its "type" member, the usage of a terminal event, the
// text of a delta, in the same bounded memory (a long event kept as its
// first and last bytes). A line end in data (JSON whitespace, never
// inside a string) is read as a space, so that it cannot end the event
// early. The Meter must be one of text/event-stream (NewMeter); data is
// not retained.
func (m *Meter) WriteEvent(data []byte) {
	if m.finished || m.mode != modeSSE {
		return
	}
	m.sse.feed(sseData, m)
	for len(data) > 0 {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			m.sse.feed(data, m)
			break
		}
		if i > 0 {
			m.sse.feed(data[:i], m)
		}
		m.sse.feed(space, m)
		data = data[i+1:]
	}
	m.sse.feed(sseEnd, m)
}
