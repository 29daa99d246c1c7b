package proxy

import (
	"net/url"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// ServerConfig is the listening side. The YAML keys are the koanf tags,
// BodyLimits' and SocketLimits' among them: squashed, they are server's
// own (server.max_body_bytes).
type ServerConfig struct {
	// Listen is where callers connect, the proxy's address, e.g. ":8080".
	Listen string `koanf:"listen"`
	// AdminListen serves /healthz, /readyz, /metrics and /admin/*, e.g.
	// "127.0.0.1:9090". The default is loopback: expose it on purpose.
	AdminListen string `koanf:"admin_listen"`
	// ShutdownGrace is how long admitted and held requests may take to
	// finish after SIGTERM.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// BodyLimits bound the request bodies a client sends and the memory
	// they hold.
	BodyLimits `koanf:",squash,flatten"`
	// MaxConcurrentStreams bounds the HTTP/2 (h2c) streams one client
	// connection may have open at once.
	MaxConcurrentStreams int `koanf:"max_concurrent_streams"`
	// MaxUnknownCallerStreams bounds the requests of unknown callers
	// (classify.unknown_callers: forward) one HTTP/2 connection may have
	// in progress at once; past it they get a 429 (too_many_streams). A
	// connection is tied to no caller before its first request, so its
	// streams are counted as they come (connstreams.go).
	MaxUnknownCallerStreams int `koanf:"max_unknown_caller_streams"`
	// WriteStallTimeout bounds how long one write of an answer to its
	// client may block, at least 1s: renewed before every write, so a
	// stream that keeps flowing runs as long as it needs, and a client
	// that stops reading is cut this long after its last write went
	// through. The
	// request's slot is not held meanwhile: it is released when the
	// upstream's answer ends (readahead.go).
	WriteStallTimeout time.Duration `koanf:"write_stall_timeout"`
	// SocketLimits bound the WebSockets a client opens and the messages
	// it sends on them.
	SocketLimits `koanf:",squash,flatten"`
	// AdminToken, when set, is the bearer token /admin/* and
	// /debug/pprof/* require. Without it, never expose AdminListen.
	AdminToken string `koanf:"admin_token"`
	// DecisionHeaders answers every request with how meterproxy treated
	// it: X-Meterproxy-Class (the class it was counted in), and once its
	// pool was known X-Meterproxy-Account, X-Meterproxy-Pool (configured
	// names, default for the account's own) and X-Meterproxy-Queue-Ms
	// (the wait for admission, whole milliseconds) — never a key, nor
	// anything the caller sent. A WebSocket's 101 carries the class and
	// account. False sends none of them. Like the rest of server, it
	// applies at start.
	DecisionHeaders bool `koanf:"decision_headers"`
}

// BodyLimits are the server keys that bound request bodies: the size of
// one, read whole or streamed, the time to read it, and the memory all of
// them hold at once. Its keys are server's own: ServerConfig embeds it
// squashed (for the decoder, mapstructure) and flattened (for the map of
// the defaults, fatih/structs), and reaches its fields by promotion.
type BodyLimits struct {
	// MaxBodyBytes bounds a request body that is read whole before
	// admission (every request but batches and uploads); larger ones get a
	// 413.
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// MaxUploadBytes bounds a batch or upload body (/v1/batches…,
	// /v1/messages/batches…, /v1/files…, /v1/uploads…), which streams
	// through without being held in memory; larger ones get a 413.
	MaxUploadBytes int64 `koanf:"max_upload_bytes"`
	// MaxBodyMemoryBytes bounds the bytes of every request body held in
	// memory at once, held requests' included, and of the answers read
	// ahead of slow clients (at most half of it); past it a request gets
	// a 503 (body_memory_exhausted). The last quarter is kept for
	// interactive requests.
	MaxBodyMemoryBytes int64 `koanf:"max_body_memory_bytes"`
	// BodyReadTimeout bounds the time to read a body that is read whole,
	// from the handler's start; for a streamed upload it bounds each wait
	// for more bytes. Past it the request gets a 408.
	BodyReadTimeout time.Duration `koanf:"body_read_timeout"`
}

// SocketLimits are the server keys that bound WebSockets: a message's
// size, a client's message rate, the sockets a caller holds open and how
// long one may idle. Its keys are server's own, as BodyLimits' are.
type SocketLimits struct {
	// MaxSocketMessageBytes bounds one WebSocket message either way (a
	// Responses WebSocket's response.create, an event the upstream
	// sends), counted after permessage-deflate decompression; a larger
	// one closes the socket with 1009 (message too big). Messages are
	// held in memory whole, charged to MaxBodyMemoryBytes, which it may
	// not exceed. 0 is MaxBodyBytes: a response.create is the body of a
	// POST (see "The Responses API over WebSocket").
	MaxSocketMessageBytes int64 `koanf:"max_socket_message_bytes"`
	// MaxSocketMessagesPerSecond bounds the messages one client sends on
	// one socket, per second (a burst of as many at once): past it the
	// proxy reads the next one later, so the client is slowed, not cut.
	MaxSocketMessagesPerSecond int `koanf:"max_socket_messages_per_second"`
	// MaxSocketsPerCaller bounds the WebSockets one caller (each
	// configured caller; every unknown caller together) has open on this
	// replica; past it the handshake gets a 429 (too_many_sockets).
	MaxSocketsPerCaller int `koanf:"max_sockets_per_caller"`
	// SocketIdleTimeout closes a WebSocket (1001) on which no message went
	// either way for this long while no turn was in flight.
	SocketIdleTimeout time.Duration `koanf:"socket_idle_timeout"`
}

// UpstreamConfig is the provider side.
type UpstreamConfig struct {
	// URL is the provider's base URL, e.g. https://api.openai.com, without
	// the /v1 an SDK's base URL ends in (without /openai for Azure): the
	// proxy forwards the caller's path whole, so https://api.openai.com/v1
	// would ask for /v1/v1/… and is refused at start, naming the fix.
	URL string `koanf:"url"`
	// APIKey, when set, replaces each caller's credential; empty, each
	// caller's own key passes through. Set, it needs
	// classify.unknown_callers: reject, or KeyForUnknownCallers.
	APIKey string `koanf:"api_key"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers; past it the caller gets a 504.
	ResponseHeaderTimeout time.Duration `koanf:"response_header_timeout"`
	// MaxConnections caps connections to the upstream (per host); 0
	// derives it from the per-replica in-flight bound (+10%, at least +4)
	// so the pool is never a second gate.
	MaxConnections int `koanf:"max_connections"`
	// InjectStreamUsage adds stream_options.include_usage to streamed OpenAI
	// chat requests that lack it, so every stream reports its tokens, and
	// strips the extra chunk for the callers that did not ask for it.
	InjectStreamUsage bool `koanf:"inject_stream_usage"`
	// KeyForUnknownCallers allows APIKey to be sent for callers whose key
	// is not configured (classify.unknown_callers: forward): then anyone
	// who reaches the proxy spends the account: an open relay, to be set
	// on purpose. Off, that combination is refused at start.
	KeyForUnknownCallers bool `koanf:"key_for_unknown_callers"`
	// MaxHold bounds how long one response's rate-limit headers or 429 may
	// hold bulk, whatever reset or retry-after it announces.
	MaxHold time.Duration `koanf:"max_hold"`
	// Refill is how the provider's buckets refill, which decides how long
	// its headers hold bulk once the account is below the reserve: auto
	// (continuous for OpenAI, OpenAI-compatible servers and Anthropic;
	// window for Azure), continuous or window. See refillOf.
	Refill Refill `koanf:"refill"`
	// Provider is the provider behind the upstream's URL, whose
	// accounting (how tokens are charged, how buckets refill) every
	// request falls under: auto (by path — /v1/messages and /v1/complete
	// Anthropic, /openai/… Azure, /v1beta/… and /v1/models/{model}:method
	// Gemini — else by host — api.openai.com OpenAI, *.openai.azure.com
	// Azure, api.anthropic.com Anthropic, generativelanguage.googleapis.com
	// Gemini — else an OpenAI-compatible server), openai, azure,
	// anthropic, openai-compatible or gemini (set it when the upstream is
	// a gateway in front of one provider). Named, it holds for every path:
	// anthropic with /v1/chat/completions is Anthropic's OpenAI-compatible
	// endpoint, charged as Anthropic charges. It never changes what the
	// path speaks: where usage and the model are read, the error shape,
	// the credential header. See the provider table, provider.go.
	Provider Provider `koanf:"provider"`
	// Accounts, when set, are several provider accounts behind the proxy,
	// each with its URL, provider, key and limits (Account; see "Several
	// accounts" and "Several providers"). Set, the upstream's url and
	// APIKey, the top-level account section but its expected_replicas and
	// models (the pools every account that lists none shares), and
	// classify.unknown_callers: forward are refused.
	Accounts []Account `koanf:"accounts"`
}

// Config is the proxy's part of the configuration.
type Config struct {
	Server   ServerConfig
	Upstream UpstreamConfig
}

// minWriteStall is the least server.write_stall_timeout may be.
const minWriteStall = time.Second

// DefaultServerConfig returns the server defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Listen: ":8080",
		// Loopback: /metrics and /admin/state tell anyone who can reach them
		// about the account. The chart sets the pod's address explicitly.
		AdminListen:   "127.0.0.1:9090",
		ShutdownGrace: 30 * time.Second,
		// A caller should see the class it was counted in, and where it
		// waited: an importer whose interactive claim was denied learns
		// it from its own answers. Names from config only.
		DecisionHeaders: true,
		BodyLimits: BodyLimits{
			// Anthropic documents 32 MB for Messages; chat bodies are far smaller.
			MaxBodyBytes: 32 << 20,
			// Anthropic's Files API takes 500 MB, OpenAI's files 512 MB.
			MaxUploadBytes: 512 << 20,
			// Eight bodies of the largest size, or thousands of chat turns.
			MaxBodyMemoryBytes: 256 << 20,
			// A 32 MiB body at 10 Mbit/s takes 27 s.
			BodyReadTimeout: time.Minute,
		},
		// RFC 9113 recommends at least 100; Go's default is 250.
		MaxConcurrentStreams: 100,
		// An SDK's connection pool rarely multiplexes more on one
		// connection; a caller no key names gets no more.
		MaxUnknownCallerStreams: 8,
		// Far longer than any client that reads takes to accept one
		// write (a 32 KiB chunk at 10 kbit/s takes 26 s), short enough
		// that a client that never reads holds its answer's memory
		// briefly.
		WriteStallTimeout: 30 * time.Second,
		SocketLimits: SocketLimits{
			// Far above an agent's turns, room for a Realtime session's
			// audio (an append every 20 ms is 50 a second).
			MaxSocketMessagesPerSecond: 100,
			// A fleet of agents under one key runs one socket each; an unknown
			// caller no key names gets no more, all of them together.
			MaxSocketsPerCaller: 128,
			// An agent waits on its user between turns; the provider closes
			// a socket at 60 minutes whatever it does.
			SocketIdleTimeout: 15 * time.Minute,
		},
	}
}

// DefaultUpstreamConfig returns the upstream defaults.
func DefaultUpstreamConfig() UpstreamConfig {
	return UpstreamConfig{
		URL:                   "https://api.openai.com",
		ResponseHeaderTimeout: 10 * time.Minute,
		// Long enough for any per-minute bucket to refill; a report of
		// hours (or a caller's forged 429) holds no longer.
		MaxHold:  5 * time.Minute,
		Refill:   RefillAuto,
		Provider: ProviderAuto,
		Accounts: []Account{},
	}
}

// Validate reports every problem at once, each naming its key relative to
// Config (server.…, upstream.…; see configcheck). It changes nothing.
func (c Config) Validate() error {
	var p configcheck.Problems
	bad := p.Add
	if c.Server.Listen == "" {
		bad("server.listen", "must not be empty")
	}
	if c.Server.AdminListen == "" {
		bad("server.admin_listen", "must not be empty")
	} else if c.Server.AdminListen == c.Server.Listen && !strings.HasSuffix(c.Server.Listen, ":0") {
		bad("server.admin_listen", "must differ from %s", configcheck.Ref("server.listen"))
	}
	if c.Server.ShutdownGrace < 0 {
		bad("server.shutdown_grace", "must be >= 0, got %s", c.Server.ShutdownGrace)
	}
	if c.Server.MaxBodyBytes <= 0 {
		bad("server.max_body_bytes", "must be > 0, got %d", c.Server.MaxBodyBytes)
	}
	if c.Server.MaxUploadBytes <= 0 {
		bad("server.max_upload_bytes", "must be > 0, got %d", c.Server.MaxUploadBytes)
	}
	if c.Server.MaxBodyMemoryBytes < c.Server.MaxBodyBytes {
		bad("server.max_body_memory_bytes", "must be >= %s (%d), or no body of the largest size could ever be read; got %d",
			configcheck.Ref("server.max_body_bytes"), c.Server.MaxBodyBytes, c.Server.MaxBodyMemoryBytes)
	}
	if c.Server.BodyReadTimeout <= 0 {
		bad("server.body_read_timeout", "must be > 0, got %s", c.Server.BodyReadTimeout)
	}
	if c.Server.MaxConcurrentStreams <= 0 {
		bad("server.max_concurrent_streams", "must be > 0, got %d", c.Server.MaxConcurrentStreams)
	}
	if c.Server.MaxUnknownCallerStreams <= 0 {
		bad("server.max_unknown_caller_streams", "must be > 0, got %d", c.Server.MaxUnknownCallerStreams)
	}
	if c.Server.WriteStallTimeout < minWriteStall {
		bad("server.write_stall_timeout", "must be at least %s (shorter cuts clients that read, at the first hiccup of their network), got %s",
			minWriteStall, c.Server.WriteStallTimeout)
	}
	c.Server.validateSockets(bad)
	if len(c.Upstream.Accounts) == 0 {
		checkUpstreamURL(bad, "upstream.url", c.Upstream.URL, c.Upstream.Provider)
	}
	c.validateAccountEndpoints(bad)
	if c.Upstream.ResponseHeaderTimeout <= 0 {
		bad("upstream.response_header_timeout", "must be > 0, got %s", c.Upstream.ResponseHeaderTimeout)
	}
	if err := configcheck.OneOf(c.Upstream.Provider, providers...); err != nil {
		bad("upstream.provider", "%v", err)
	}
	if err := configcheck.OneOf(c.Upstream.Refill, refills...); err != nil {
		bad("upstream.refill", "%v", err)
	}
	if c.Upstream.MaxHold <= 0 {
		bad("upstream.max_hold", "must be > 0, got %s", c.Upstream.MaxHold)
	}
	if c.Upstream.MaxConnections < 0 {
		bad("upstream.max_connections", "must be >= 0 (0 = derived from the in-flight bound), got %d", c.Upstream.MaxConnections)
	}
	return p.Err()
}

// checkUpstreamURL checks raw, the URL at key, and returns it parsed and
// whether it is valid.
func checkUpstreamURL(bad func(string, string, ...any), key, raw string, provider Provider) (*url.URL, bool) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		bad(key, "must be an http:// or https:// URL with a host, got %q", raw)
	case u.User != nil || u.RawQuery != "":
		bad(key, "must not carry credentials or a query")
	default:
		if doubled := doubledPrefix(u, provider); doubled != "" {
			bad(key, "ends in %s, which the callers' request paths already begin with (%s/…): the upstream would be asked for %s%s/…; write %q",
				doubled, doubled, doubled, doubled, strings.TrimSuffix(strings.TrimRight(raw, "/"), doubled))
			return u, false
		}
		return u, true
	}
	return nil, false
}

// validateSockets checks the WebSocket bounds.
func (c ServerConfig) validateSockets(bad func(string, string, ...any)) {
	switch {
	case c.MaxSocketMessageBytes < 0:
		bad("server.max_socket_message_bytes", "must be >= 0 (0 = %s), got %d", configcheck.Ref("server.max_body_bytes"), c.MaxSocketMessageBytes)
	case c.MaxSocketMessageBytes > c.MaxBodyMemoryBytes:
		bad("server.max_socket_message_bytes", "must be <= %s (%d): a message is held in memory whole; got %d",
			configcheck.Ref("server.max_body_memory_bytes"), c.MaxBodyMemoryBytes, c.MaxSocketMessageBytes)
	}
	if c.MaxSocketMessagesPerSecond <= 0 {
		bad("server.max_socket_messages_per_second", "must be > 0, got %d", c.MaxSocketMessagesPerSecond)
	}
	if c.MaxSocketsPerCaller <= 0 {
		bad("server.max_sockets_per_caller", "must be > 0, got %d", c.MaxSocketsPerCaller)
	}
	if c.SocketIdleTimeout < minWriteStall {
		bad("server.socket_idle_timeout", "must be at least %s, got %s", minWriteStall, c.SocketIdleTimeout)
	}
}
