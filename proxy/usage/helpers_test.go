package usage

import "strings"

// chunkSizes are the write sizes every stream is fed in; 0 means whole.
var chunkSizes = []int{1, 7, 0}

// writeChunks writes data to w in pieces of size bytes (0: at once).
func writeChunks(w interface{ Write([]byte) (int, error) }, data []byte, size int) error {
	if size <= 0 {
		size = max(len(data), 1)
	}
	for len(data) > 0 {
		n := min(size, len(data))
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// meter runs a Meter over body written in pieces of size bytes.
func meter(api API, contentType string, inputEstimate int64, body string, size int, complete bool) Usage {
	m := NewMeter(api, contentType, inputEstimate)
	_ = writeChunks(m, []byte(body), size) // a Meter never fails
	return m.Finish(complete)
}

// crlf rewrites a stream's line ends as CRLF; cr as lone CRs.
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
func cr(s string) string   { return strings.ReplaceAll(s, "\n", "\r") }

// nospace writes "data:" without the optional space.
func nospace(s string) string {
	s = strings.ReplaceAll(s, "data: ", "data:")
	return strings.ReplaceAll(s, "event: ", "event:")
}

// held returns the bytes a Meter's buffers hold (their capacity).
func held(m *Meter) int { return m.body.held() + m.sse.held() }
