package proxy

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// SessionLimits are classes.<class>.max_sessions and
// callers[].max_sessions: the most Realtime sessions open at once on
// this replica, by class and by caller name. 0, or a caller absent, is
// no bound. The zero value bounds nothing.
type SessionLimits struct {
	Class  [classify.NumClasses]int
	Caller map[string]int
}

// NewSessionLimits reads the session bounds of the classes and callers.
func NewSessionLimits(classes quota.ClassesConfig, callers []classify.Caller) SessionLimits {
	l := SessionLimits{Caller: map[string]int{}}
	l.Class[classify.Interactive], l.Class[classify.Bulk] = classes.Interactive.MaxSessions, classes.Bulk.MaxSessions
	for _, c := range callers {
		if c.MaxSessions > 0 {
			l.Caller[c.Name] = c.MaxSessions
		}
	}
	return l
}

// sessionSet counts the Realtime sessions open on this replica, by class
// and by caller (a configured name or classify.UnknownCaller, so its map
// is bounded by the configuration). Safe for concurrent use.
type sessionSet struct {
	mu       sync.Mutex
	byClass  [classify.NumClasses]int
	byCaller map[string]int
}

func newSessionSet() *sessionSet { return &sessionSet{byCaller: map[string]int{}} }

// enter counts a session of res about to open, unless it would be one
// past lim for its caller or its class: then it counts nothing and
// returns the refusal. exit, called once when the session has ended,
// uncounts it.
func (ss *sessionSet) enter(res classify.Result, lim SessionLimits) (exit func(), f *refusal) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	c := res.Class
	if !c.Valid() {
		c = classify.Bulk
	}
	if n := lim.Caller[res.Caller]; n > 0 && ss.byCaller[res.Caller] >= n {
		return nil, tooManySessions(fmt.Sprintf("this caller may have at most %d Realtime sessions open at once (callers[].max_sessions)", n))
	}
	if n := lim.Class[c]; n > 0 && ss.byClass[c] >= n {
		return nil, tooManySessions(fmt.Sprintf("the %s class may have at most %d Realtime sessions open at once (classes.%s.max_sessions)", c, n, c))
	}
	ss.byClass[c]++
	ss.byCaller[res.Caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			ss.byClass[c]--
			if ss.byCaller[res.Caller]--; ss.byCaller[res.Caller] <= 0 {
				delete(ss.byCaller, res.Caller)
			}
		})
	}, nil
}

// tooManySessions is the refusal of a Realtime handshake past a session
// bound, why saying which: a 429 in the provider's shape, retried as
// any rate limit is.
func tooManySessions(why string) *refusal {
	return &refusal{status: http.StatusTooManyRequests, reason: reasonTooManySessions, kind: "rate_limit_error",
		retry: true, retryAfter: time.Second, message: "meterproxy: " + why + "; close one first"}
}

// realtimeMetrics are the Realtime sessions' collectors: label values are
// the classes and the configured callers' names (others "unknown").
type realtimeMetrics struct {
	// sessions counts the sessions open on this replica.
	sessions *prometheus.GaugeVec
	// unheld counts the responses the provider created itself (server
	// voice detection), which no admission held.
	unheld *prometheus.CounterVec
}

func newRealtimeMetrics(f promauto.Factory) realtimeMetrics {
	return realtimeMetrics{
		sessions: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meterproxy_realtime_sessions",
			Help: "Realtime sessions open on this replica now, by class and caller (configured names; every unknown caller as unknown); bounded by classes.<class>.max_sessions and callers[].max_sessions.",
		}, []string{"class", "caller"}),
		unheld: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_realtime_unheld_responses_total",
			Help: "Realtime responses the provider created itself (server voice detection: no response.create to hold), by class: admitted after the fact, their usage settled as any other's.",
		}, []string{"class"}),
	}
}
