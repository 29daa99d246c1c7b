package proxy

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"
)

// pprofPath is where the Go profiler is served on the admin listener.
const pprofPath = "/debug/pprof"

// mountPprof serves the Go profiler (net/http/pprof) on the admin router
// a at /debug/pprof/ — the index, cmdline, profile, symbol, trace and
// every named profile (heap, goroutine, allocs, block, mutex,
// threadcreate) — behind the admin token, as /admin/* is.
func mountPprof(a chi.Router, token string) {
	a.Route(pprofPath, func(r chi.Router) {
		r.Use(requireToken(token))
		r.Get("/", pprof.Index)
		r.Get("/cmdline", pprof.Cmdline)
		r.Get("/profile", pprof.Profile)
		r.Get("/symbol", pprof.Symbol)
		r.Post("/symbol", pprof.Symbol) // go tool pprof posts the addresses it looks up
		r.Get("/trace", pprof.Trace)
		r.Get("/{name}", pprof.Index) // a named profile: Index serves it by the path's last segment
	})
}

// refusePprof answers /debug/pprof on the proxy listener r with a 404 of
// its own, whatever the request carries: the profiler is the admin
// listener's, and a caller's keyed request for it is not forwarded
// upstream either.
func refusePprof(r chi.Router) {
	r.Handle(pprofPath, http.NotFoundHandler())
	r.Handle(pprofPath+"/*", http.NotFoundHandler())
}
