package redistest

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
)

// Relay is a TCP relay in front of a Redis server that a test can make
// stall without stopping Redis: while it holds, commands still reach
// Redis and run, but Redis's answers are kept back until Release. A
// client sees a call time out that ran all the same, as after a network
// stall or a Redis that answered too late. It counts, for each string it
// watches, the commands holding it that were answered and those whose
// client gave up on them (closed the connection while their answer was
// kept back). It works on an external server too: it stops nothing.
//
// It relies on clients sending one command at a time on a connection and
// waiting for its answer, as go-redis does outside pipelines (go-redis
// sends command names in lower case: watch "evalsha", not "EVALSHA"). A
// connection opened while the relay holds waits for its handshake's
// answers too.
type Relay struct {
	url   string
	ln    net.Listener
	watch []string
	wg    sync.WaitGroup

	mu sync.Mutex
	// held is open while answers are kept back, closed (or nil) while
	// they flow.
	held      chan struct{}
	conns     map[*relayConn]struct{}
	closed    bool // at cleanup: a connection accepted now is closed
	answered  map[string]int
	abandoned map[string]int
}

// relayConn is one client connection through a Relay and its connection
// to Redis.
type relayConn struct {
	client, server net.Conn
	// cmd is the command the client sent and has no answer to yet (its
	// first maxRelayCommand bytes); kept says Redis answered it and the
	// answer is kept back. Guarded by the Relay's mu.
	cmd  []byte
	kept bool
}

// maxRelayCommand bounds what a Relay keeps of one command to match.
const maxRelayCommand = 64 << 10

// Relay starts a relay in front of s that counts the commands holding any
// of watch, and stops it at t.Cleanup.
func (s *Server) Relay(t testing.TB, watch ...string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: relay: %v", err)
	}
	r := &Relay{url: strings.Replace(s.url, s.addr, ln.Addr().String(), 1), ln: ln, watch: watch,
		conns: map[*relayConn]struct{}{}, answered: map[string]int{}, abandoned: map[string]int{}}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", s.addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			rc := &relayConn{client: c, server: up}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				rc.close()
				return
			}
			r.conns[rc] = struct{}{}
			r.mu.Unlock()
			r.wg.Go(func() { r.up(rc) })
			r.wg.Go(func() { r.down(rc) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		r.Release()
		r.mu.Lock()
		r.closed = true
		for rc := range r.conns {
			rc.close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// URL returns the server's URL with the relay's address in place of the
// server's.
func (r *Relay) URL() string { return r.url }

// Hold keeps back every answer Redis sends from now on until Release.
func (r *Relay) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = make(chan struct{})
	}
}

// Release delivers the answers kept back to the clients still connected,
// and lets answers flow again.
func (r *Relay) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held != nil {
		close(r.held)
		r.held = nil
	}
}

// Answered returns how many commands holding watch (one of the strings
// Relay was given) got their answer.
func (r *Relay) Answered(watch string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered[watch]
}

// Abandoned returns how many commands holding watch ran but never got
// their answer: their client closed the connection while it was kept
// back.
func (r *Relay) Abandoned(watch string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abandoned[watch]
}

// count adds one to counts for every watched string cmd holds. Called
// with mu held.
func (r *Relay) count(counts map[string]int, cmd []byte) {
	for _, w := range r.watch {
		if bytes.Contains(cmd, []byte(w)) {
			counts[w]++
		}
	}
}

// up copies the client's commands to Redis; when the client leaves, a
// command whose answer was kept back counts as abandoned.
func (r *Relay) up(rc *relayConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.client.Read(buf)
		if n > 0 {
			r.mu.Lock()
			rc.cmd = append(rc.cmd, buf[:min(n, maxRelayCommand-len(rc.cmd))]...)
			r.mu.Unlock()
			if _, werr := rc.server.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			r.mu.Lock()
			if rc.kept {
				r.count(r.abandoned, rc.cmd)
				rc.cmd, rc.kept = nil, false
			}
			delete(r.conns, rc)
			r.mu.Unlock()
			rc.close()
			return
		}
	}
}

// down copies Redis's answers to the client, keeping them back while the
// relay holds.
func (r *Relay) down(rc *relayConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.server.Read(buf)
		if n > 0 {
			r.mu.Lock()
			held := r.held
			if held != nil {
				rc.kept = true
			}
			r.mu.Unlock()
			if held != nil {
				<-held
			}
			r.mu.Lock()
			if len(rc.cmd) > 0 {
				r.count(r.answered, rc.cmd)
				rc.cmd = nil
			}
			rc.kept = false
			r.mu.Unlock()
			if _, werr := rc.client.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			rc.close()
			return
		}
	}
}

// close closes both sides of rc.
func (rc *relayConn) close() {
	_ = rc.client.Close()
	_ = rc.server.Close()
}
