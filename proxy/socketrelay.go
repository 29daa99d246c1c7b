package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/meterproxy/meterproxy/classify"
)

// Who ended a socket (socket.finish): the sides of
// meterproxy_sockets_closed_total and of a cut turn.
const (
	socketSideClient   = "client"
	socketSideUpstream = "upstream"
	// socketSideProxy: meterproxy closed it — a bound (message size,
	// memory, idle), or the drain.
	socketSideProxy = "meterproxy"
)

// socketQueue is how many of a client's messages are read ahead of the
// one being dispatched (each charged to the body memory budget): enough
// that the client's pings and its close are noticed while a turn waits
// for admission, few enough to hold little.
const socketQueue = 4

// socket is one open WebSocket and its upstream: three goroutines relay
// it — the client's reader, the dispatcher (the meter's client hook,
// which admits turns, then the write upstream) and the upstream's reader
// (the meter's upstream hook, then the write to the client) — and a
// watcher ends it when idle or drained. Its fields are set before they
// start, but for the atomics and what finish guards.
type socket struct {
	sk  *sockets
	api socketAPI
	// ex is the handshake's exchange: the caller, its class and route,
	// the account the upstream socket is open at. Turns copy it.
	ex       *exchange
	client   *websocket.Conn
	upstream *websocket.Conn
	meter    socketMeter
	socketLife
	socketWatch
	// queue carries the client's messages to the dispatcher.
	queue chan *socketMessage
	// served is the model the upstream says serves the socket's turns,
	// for a turn whose own events name none: a Realtime session's
	// session.model (serving). Nil: none named.
	served atomic.Pointer[string]
	end    sync.Once
	side   string
}

// socketLife is how a socket's work ends: work ends when the socket
// starts to end, and a turn waiting for admission stops waiting; io ends
// once both sides are closed, and reads and writes stop (coder/websocket
// closes a connection whose operation's context ends, without a close
// frame, so the close codes go first).
type socketLife struct {
	work, io         context.Context
	stopWork, stopIO context.CancelFunc
}

// socketWatch is what a socket's watcher (watch) watches: turns counts
// the turns in flight, and quiet has room for one signal that one ended;
// active is when the last message went either way (unix ns); drain is
// closed when the proxy drains.
type socketWatch struct {
	turns  atomic.Int64
	quiet  chan struct{}
	active atomic.Int64
	drain  chan struct{}
}

// Close reasons meterproxy gives.
const (
	closeShuttingDown = "meterproxy: shutting down"
	closeIdle         = "meterproxy: idle for server.socket_idle_timeout"
	closeUpstreamLost = "meterproxy: the upstream connection was lost"
	closeTooBig       = "meterproxy: a message exceeded server.max_socket_message_bytes"
	closeMemory       = "meterproxy: too many messages in memory (server.max_body_memory_bytes)"
)

// interactive says the socket's class is interactive, for the budget.
func (s *socket) interactive() bool { return s.ex.res.Class == classify.Interactive }

// touch records a message going either way now.
func (s *socket) touch() { s.active.Store(time.Now().UnixNano()) }

// readClient reads the client's messages, at most
// server.max_socket_messages_per_second, into the dispatcher's queue.
func (s *socket) readClient() {
	perSec := s.sk.bounds.perSecond
	lim := rate.NewLimiter(rate.Limit(perSec), perSec)
	for {
		if lim.Wait(s.work) != nil {
			return
		}
		m, err := readMessage(s.io, s.client, s.sk.bodies.budget, s.sk.bounds.maxMessage, s.interactive(), false)
		switch {
		case errors.Is(err, errSocketMemory):
			s.touch()
			s.tellRefusal(memoryRefusal(), "")
			continue
		case err != nil:
			s.clientFailed(err)
			return
		}
		s.touch()
		select {
		case s.queue <- m:
		case <-s.work.Done():
			m.release()
			return
		}
	}
}

// memoryRefusal is the answer to a message the budget could not hold,
// as an HTTP body's is (bodyRefusal).
func memoryRefusal() refusal {
	f, _ := bodyRefusal(errBodyMemory, false)
	return f
}

// dispatch hands each of the client's messages to the meter, and sends
// upstream those it lets through.
func (s *socket) dispatch() {
	for {
		var m *socketMessage
		select {
		case m = <-s.queue:
		case <-s.work.Done():
			return
		}
		ok := s.meter.client(s.work, m)
		var err error
		if ok {
			err = s.write(s.upstream, m.typ, m.data())
		}
		m.release()
		if err != nil {
			s.finish(socketSideUpstream, websocket.StatusBadGateway, closeUpstreamLost)
			return
		}
	}
}

// readUpstream relays the upstream's messages to the client, each seen
// by the meter first.
func (s *socket) readUpstream() {
	for {
		m, err := readMessage(s.io, s.upstream, s.sk.bodies.budget, s.sk.bounds.maxMessage, s.interactive(), true)
		if err != nil {
			s.upstreamFailed(err)
			return
		}
		s.touch()
		s.meter.upstream(m)
		err = s.write(s.client, m.typ, m.data())
		m.release()
		if err != nil {
			s.finish(socketSideClient, websocket.StatusGoingAway, "")
			return
		}
	}
}

// write sends one message to c within server.write_stall_timeout.
func (s *socket) write(c *websocket.Conn, typ websocket.MessageType, p []byte) error {
	ctx, cancel := context.WithTimeout(s.io, s.sk.writeStall)
	defer cancel()
	return c.Write(ctx, typ, p)
}

// tell writes p, a message of meterproxy's own (an error event), to the
// client; ctx may end the wait.
func (s *socket) tell(p []byte) error { return s.write(s.client, websocket.MessageText, p) }

// clientFailed ends the socket after reading from the client failed: its
// close passed upstream, a message too large (the client was told 1009),
// or the client gone.
func (s *socket) clientFailed(err error) {
	if ce, ok := errors.AsType[websocket.CloseError](err); ok {
		s.finish(socketSideClient, ce.Code, ce.Reason)
		return
	}
	if errors.Is(err, websocket.ErrMessageTooBig) {
		s.finish(socketSideProxy, websocket.StatusGoingAway, closeTooBig)
		return
	}
	s.finish(socketSideClient, websocket.StatusGoingAway, "")
}

// upstreamFailed ends the socket after reading from the upstream failed:
// its close passed to the client (the provider's connection-age limit
// among them), a message too large or one the budget could not hold, or
// the connection lost.
func (s *socket) upstreamFailed(err error) {
	switch ce, ok := errors.AsType[websocket.CloseError](err); {
	case ok:
		s.finish(socketSideUpstream, ce.Code, ce.Reason)
	case errors.Is(err, websocket.ErrMessageTooBig):
		s.finish(socketSideProxy, websocket.StatusMessageTooBig, closeTooBig)
	case errors.Is(err, errSocketMemory):
		s.finish(socketSideProxy, websocket.StatusTryAgainLater, closeMemory)
	default:
		s.finish(socketSideUpstream, websocket.StatusBadGateway, closeUpstreamLost)
	}
}

// finish ends the socket once, for side: turns stop waiting, the close
// code and reason go to whichever side did not send them (a code no
// close frame may carry — none received, an abnormal end — goes as
// 1001 to the client's upstream, as 1014 to the upstream's client), and
// then every read and write stops. Later calls do nothing.
func (s *socket) finish(side string, code websocket.StatusCode, reason string) {
	s.end.Do(func() {
		s.side = side
		s.stopWork()
		if !sendable(code) {
			code = websocket.StatusGoingAway
			if side == socketSideUpstream {
				code = websocket.StatusBadGateway
			}
		}
		var wg sync.WaitGroup
		if side != socketSideUpstream {
			wg.Go(func() { _ = s.upstream.Close(code, reason) })
		}
		if side != socketSideClient {
			wg.Go(func() { _ = s.client.Close(code, reason) })
		}
		wg.Wait()
		_ = s.upstream.CloseNow()
		_ = s.client.CloseNow()
		s.stopIO()
		s.sk.log.Debug("socket_closed", slog.String("side", side), slog.Int("code", int(code)), slog.String("caller", s.ex.res.Caller))
	})
}

// sendable reports whether a close frame may carry code (RFC 6455
// section 7.4: not 1005, 1006 or 1015, which say no frame carried one).
func sendable(code websocket.StatusCode) bool {
	switch {
	case code == websocket.StatusNoStatusRcvd || code == websocket.StatusAbnormalClosure || code == websocket.StatusTLSHandshake || code == 1004:
		return false
	case code >= websocket.StatusNormalClosure && code <= websocket.StatusBadGateway, code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// watch ends the socket once it has been idle for
// server.socket_idle_timeout with no turn in flight, or once the proxy
// drains and no turn is in flight.
func (s *socket) watch() {
	idle := s.sk.bounds.idle
	t := time.NewTimer(idle)
	defer t.Stop()
	drain, draining := s.drain, false
	for {
		select {
		case <-s.work.Done():
			return
		case <-drain:
			drain, draining = nil, true
		case <-s.quiet:
		case <-t.C:
			left := idle - time.Since(time.Unix(0, s.active.Load()))
			if left <= 0 && s.turns.Load() == 0 {
				s.finish(socketSideProxy, websocket.StatusGoingAway, closeIdle)
				return
			}
			t.Reset(max(left, idle/10))
		}
		if draining && s.turns.Load() == 0 {
			s.finish(socketSideProxy, websocket.StatusGoingAway, closeShuttingDown)
			return
		}
	}
}

// draining reports whether the proxy drains: no new turn is admitted.
func (s *socket) draining() bool { return s.sk.set.draining.Load() }
