package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/meterproxy/meterproxy/classify"
)

// socketBounds are the server.* keys that bound sockets.
type socketBounds struct {
	// maxMessage is server.max_socket_message_bytes; perSecond
	// server.max_socket_messages_per_second; perCaller
	// server.max_sockets_per_caller; idle server.socket_idle_timeout.
	maxMessage int64
	perSecond  int
	perCaller  int
	idle       time.Duration
}

func newSocketBounds(cfg ServerConfig) socketBounds {
	maxMessage := cfg.MaxSocketMessageBytes
	if maxMessage == 0 {
		maxMessage = cfg.MaxBodyBytes // a response.create is the body of a POST
	}
	return socketBounds{maxMessage: maxMessage, perSecond: cfg.MaxSocketMessagesPerSecond,
		perCaller: cfg.MaxSocketsPerCaller, idle: cfg.SocketIdleTimeout}
}

// sockets is the part of the handler that serves WebSockets: a
// handshake screened, admitted and dialled (serve), the socket relayed
// until it ends (run) and its turns metered by the handler's metering,
// every open socket drained at shutdown (drain). Safe for concurrent use.
type sockets struct {
	shared
	metering *metering
	records  *records
	accounts *accounts
	door     frontDoor
	// set are the sockets open, bounded by bounds; client dials their
	// upstreams through the shared transport.
	set    *socketSet
	bounds socketBounds
	client *http.Client
	// sessions counts the Realtime sessions open (realtimesessions.go).
	sessions *sessionSet
	// writeStall is server.write_stall_timeout: each message written
	// (socket.write).
	writeStall time.Duration
}

// socketSet is every socket open on this replica, and how many each
// caller has open (server.max_sockets_per_caller), so that the drain can
// reach them: net/http's Shutdown forgets a hijacked connection. Safe for
// concurrent use.
type socketSet struct {
	mu       sync.Mutex
	open     map[*socket]struct{}
	byCaller map[string]int
	// draining is set once the drain began: no socket is added, no turn
	// admitted. done is signalled when a socket is removed.
	draining atomic.Bool
	done     chan struct{}
}

func newSocketSet() *socketSet {
	return &socketSet{open: map[*socket]struct{}{}, byCaller: map[string]int{}, done: make(chan struct{}, 1)}
}

// enter counts a socket of caller about to open, and reports whether
// caller has fewer than limit open; exit undoes it, and must run either
// way. Caller is a configured name or classify.UnknownCaller, so the map
// stays bounded by the configuration.
func (ss *socketSet) enter(caller string, limit int) (exit func(), ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.byCaller[caller]++
	exit = func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.byCaller[caller]--; ss.byCaller[caller] <= 0 {
			delete(ss.byCaller, caller)
		}
	}
	return exit, ss.byCaller[caller] <= limit
}

// add registers an open socket, unless the drain began (false).
func (ss *socketSet) add(s *socket) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.draining.Load() {
		return false
	}
	ss.open[s] = struct{}{}
	return true
}

// remove forgets a socket that ended.
func (ss *socketSet) remove(s *socket) {
	ss.mu.Lock()
	delete(ss.open, s)
	ss.mu.Unlock()
	select {
	case ss.done <- struct{}{}:
	default:
	}
}

// drain drains the open sockets (Handler.DrainSockets).
func (sk *sockets) drain(ctx context.Context) {
	ss := sk.set
	ss.mu.Lock()
	ss.draining.Store(true)
	for s := range ss.open {
		close(s.drain)
	}
	open := len(ss.open)
	ss.mu.Unlock()
	sk.log.Info("sockets_draining", slog.Int("open", open))
	cut := ctx.Done()
	for {
		ss.mu.Lock()
		left := len(ss.open)
		var open []*socket
		if cut == nil {
			for s := range ss.open {
				open = append(open, s)
			}
		}
		ss.mu.Unlock()
		if left == 0 {
			return
		}
		for _, s := range open {
			go s.finish(socketSideProxy, websocket.StatusGoingAway, closeShuttingDown)
		}
		select {
		case <-ss.done:
		case <-cut:
			cut = nil
		}
	}
}

// tooManySockets is the refusal of a handshake past limit sockets of its
// caller.
func tooManySockets(limit int) refusal {
	return refusal{status: http.StatusTooManyRequests, reason: reasonTooManySockets, kind: "rate_limit_error",
		retry: true, retryAfter: time.Second,
		message: fmt.Sprintf("meterproxy: a caller may have at most %d WebSockets open at once (server.max_sockets_per_caller); close one, or use HTTP", limit)}
}

// socketMetrics are the socket layer's collectors: label values are the
// socket APIs (socketAPI.name), the classes, the request outcomes and
// the sides.
type socketMetrics struct {
	open   *prometheus.GaugeVec
	turns  *prometheus.CounterVec
	closed *prometheus.CounterVec
}

// socketAPINames are the APIs spoken over sockets, for preinit.
var socketAPINames = []string{responsesSocket{}.name(), realtimeSocket{}.name()}

func newSocketMetrics(f promauto.Factory) socketMetrics {
	m := socketMetrics{
		open: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meterproxy_sockets_open",
			Help: "WebSockets open on this replica now, by API (responses) and class.",
		}, []string{"api", "class"}),
		turns: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_socket_turns_total",
			Help: "Requests made on WebSockets (a Responses response.create), by API, class and outcome (forwarded, refused, cancelled); each is a request of meterproxy_requests_total too.",
		}, []string{"api", "class", "outcome"}),
		closed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_sockets_closed_total",
			Help: "WebSockets ended, by API and the side that ended them (client, upstream, meterproxy: a bound, idle, or the drain).",
		}, []string{"api", "side"}),
	}
	for _, api := range socketAPINames {
		for _, c := range classify.Classes {
			m.open.WithLabelValues(api, c.String())
			for _, o := range []string{outcomeForwarded, outcomeRefused, outcomeCancelled} {
				m.turns.WithLabelValues(api, c.String(), o)
			}
		}
		for _, side := range []string{socketSideClient, socketSideUpstream, socketSideProxy} {
			m.closed.WithLabelValues(api, side)
		}
	}
	return m
}
