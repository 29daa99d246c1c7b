package main

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// serveBaseline is the baseline every meterproxy figure is compared with:
// a plain httputil.ReverseProxy to upstream, no admission, no metering,
// over http.DefaultTransport's settings with the idle pool per host raised
// to the closed-loop concurrency (the stock 2 would make the baseline a
// straw man). It runs in a process of its own (bench -serve-baseline), so
// its CPU time is measured the way meterproxy's is.
func serveBaseline(ln net.Listener, upstream string) error {
	target, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: tr,
	}
	return http.Serve(ln, rp) //nolint:gosec // a loopback benchmark server; no timeouts wanted
}
