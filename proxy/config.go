package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ServerConfig is the listening side. The YAML keys are the koanf tags.
type ServerConfig struct {
	// Listen is the proxy's address, e.g. ":8080".
	Listen string `koanf:"listen"`
	// AdminListen serves /healthz, /readyz and /metrics, e.g. ":9090".
	AdminListen string `koanf:"admin_listen"`
	// ShutdownGrace is how long admitted and held requests may take to
	// finish after SIGTERM.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// MaxBodyBytes bounds a request body; larger ones get a 413.
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AdminToken, when set, is the bearer token /admin/* requires.
	AdminToken string `koanf:"admin_token"`
}

// UpstreamConfig is the provider side.
type UpstreamConfig struct {
	// URL is the provider's base URL, e.g. https://api.openai.com.
	URL string `koanf:"url"`
	// APIKey, when set, replaces the caller's credential; otherwise the
	// caller's own key passes through.
	APIKey string `koanf:"api_key"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers; past it the caller gets a 504.
	ResponseHeaderTimeout time.Duration `koanf:"response_header_timeout"`
	// MaxConnections caps connections to the upstream; 0 derives it from
	// the per-replica in-flight bound so the pool is never a second gate.
	MaxConnections int `koanf:"max_connections"`
	// InjectStreamUsage adds stream_options.include_usage to streamed OpenAI
	// chat requests that lack it, so every stream reports its tokens, and
	// strips the extra chunk for the callers that did not ask for it.
	InjectStreamUsage bool `koanf:"inject_stream_usage"`
}

// Config is the proxy's part of the configuration.
type Config struct {
	Server   ServerConfig
	Upstream UpstreamConfig
}

// DefaultServerConfig returns the server defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Listen: ":8080", AdminListen: ":9090", ShutdownGrace: 30 * time.Second, MaxBodyBytes: 32 << 20}
}

// DefaultUpstreamConfig returns the upstream defaults.
func DefaultUpstreamConfig() UpstreamConfig {
	return UpstreamConfig{URL: "https://api.openai.com", ResponseHeaderTimeout: 10 * time.Minute}
}

// Validate reports every problem at once, each naming its config key. It
// changes nothing.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if c.Server.Listen == "" {
		bad("server.listen", "must not be empty")
	}
	if c.Server.AdminListen == "" {
		bad("server.admin_listen", "must not be empty")
	} else if c.Server.AdminListen == c.Server.Listen && !strings.HasSuffix(c.Server.Listen, ":0") {
		bad("server.admin_listen", "must differ from server.listen")
	}
	if c.Server.ShutdownGrace < 0 {
		bad("server.shutdown_grace", "must be >= 0, got %s", c.Server.ShutdownGrace)
	}
	if c.Server.MaxBodyBytes <= 0 {
		bad("server.max_body_bytes", "must be > 0, got %d", c.Server.MaxBodyBytes)
	}
	if u, err := url.Parse(c.Upstream.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream.url", "must be an http:// or https:// URL with a host, got %q", c.Upstream.URL)
	} else if u.User != nil || u.RawQuery != "" {
		bad("upstream.url", "must not carry credentials or a query")
	}
	if c.Upstream.ResponseHeaderTimeout <= 0 {
		bad("upstream.response_header_timeout", "must be > 0, got %s", c.Upstream.ResponseHeaderTimeout)
	}
	if c.Upstream.MaxConnections < 0 {
		bad("upstream.max_connections", "must be >= 0 (0 = derived from the in-flight bound), got %d", c.Upstream.MaxConnections)
	}
	return errors.Join(errs...)
}
