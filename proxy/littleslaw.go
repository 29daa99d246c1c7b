package proxy

import (
	"sync"
	"time"
)

// littleWindow is how far back the measured in-flight gauge looks.
const littleWindow = 10

// littleMeter measures requests genuinely in flight by Little's law: the
// upstream service time of the requests that completed in the last
// littleWindow whole seconds, divided by that time, is throughput × mean
// service time. Beside the in-flight the proxy observes and the configured
// bound it tells whether the provider or the callers are the constraint.
// Safe for concurrent use.
type littleMeter struct {
	mu      sync.Mutex
	buckets [littleWindow + 1]littleBucket
	now     func() time.Time
}

type littleBucket struct {
	sec int64
	sum float64 // seconds of service completed in sec
	n   int64   // requests completed in sec
}

// add records a request that completed at end after d of service.
func (m *littleMeter) add(end time.Time, d time.Duration) {
	sec := end.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.buckets[sec%int64(len(m.buckets))]
	if b.sec != sec {
		*b = littleBucket{sec: sec}
	}
	b.sum += d.Seconds()
	b.n++
}

// mean is the mean service time of the requests that completed in the
// window and the current second; 0 when none did.
func (m *littleMeter) mean() time.Duration {
	now := m.now().Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum float64
	var n int64
	for _, b := range m.buckets {
		if b.sec >= now-littleWindow {
			sum, n = sum+b.sum, n+b.n
		}
	}
	if n == 0 {
		return 0
	}
	return time.Duration(sum / float64(n) * float64(time.Second))
}

// value is the average number in flight over the last whole seconds.
func (m *littleMeter) value() float64 {
	now := m.now().Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum float64
	for _, b := range m.buckets {
		if b.sec >= now-littleWindow && b.sec < now {
			sum += b.sum
		}
	}
	return sum / littleWindow
}
