package runtest

import (
	"io"
	"sync"
)

// Buffer is a log destination the goroutines of a test may write at once;
// String reads what they wrote. Its zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
}

var _ io.Writer = (*Buffer)(nil)

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
