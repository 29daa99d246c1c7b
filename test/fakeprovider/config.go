package fakeprovider

import (
	"errors"
	"fmt"
	"time"
)

// DefaultStreamChunks is the number of content chunks per stream when
// Config.StreamChunks is zero.
const DefaultStreamChunks = 5

// DefaultWSMaxAge is Config.WSMaxAge when zero: OpenAI's limit on a
// Responses WebSocket and a Realtime session.
const DefaultWSMaxAge = 60 * time.Minute

// DefaultWSMaxMessageBytes is Config.WSMaxMessageBytes when zero: 16 MiB,
// room for a Realtime input_audio_buffer.append of 15 MiB (OpenAI's
// bound) and a large Responses input.
const DefaultWSMaxMessageBytes = 16 << 20

// Config shapes a Provider. The zero value is a provider that answers at
// once, streams DefaultStreamChunks chunks, never rate-limits and reads
// time.Now.
type Config struct {
	// Latency is the delay before response headers are written. A client
	// that goes away meanwhile ends the wait. Zero means none.
	Latency time.Duration
	// StreamChunks is the number of content chunks in each SSE stream.
	// Zero means DefaultStreamChunks.
	StreamChunks int
	// ChunkInterval is the pause between SSE chunks. Zero means none.
	ChunkInterval time.Duration
	// EndLag is the pause between a stream's last event (its terminal
	// event: [DONE], message_stop, response.completed) and the stream's
	// end: an upstream whose end lags its last word, before which a client
	// that has what it wants (Codex, after response.completed) may go
	// away. A client that goes away meanwhile ends it. Zero means none.
	EndLag time.Duration
	// RPM is the provider's own limit in requests per minute. Zero means
	// unlimited, and no request rate-limit headers are sent.
	RPM int
	// TPM is the token-per-minute limit reported in headers; it is
	// reported, never enforced. Zero means not reported.
	TPM int
	// EnforceTPM makes TPM a limit: each request is charged as its
	// provider charges it (charge.go) and refused with 429 when the bucket
	// has less than that; Anthropic's output tokens are charged as they are
	// generated. Off, TPM is only reported, charged the prompt.
	EnforceTPM bool
	// OutputTPM is Anthropic's output tokens per minute (OTPM), enforced
	// with EnforceTPM: each reply's output is charged as it is generated
	// (into debt, never refused), and a request that arrives while the
	// output bucket is spent is refused with 429. TPM is then Anthropic's
	// input limit (ITPM), and /v1/messages answers carry the input-tokens
	// and output-tokens families. Zero: Anthropic's output is charged to
	// TPM with its input, and only the tokens family is sent.
	OutputTPM int
	// Models give models limits of their own, as OpenAI keeps them per
	// model and Azure per deployment: a request whose model field (or Azure
	// deployment) is listed draws on its buckets and reports them in its
	// headers; every other request on the account's (RPM, TPM, OutputTPM).
	Models []ModelLimits
	// Window makes the buckets refill in fixed windows of this length,
	// each to its share of the minute, as Azure OpenAI evaluates requests
	// "over a small period of time, typically 1 or 10 seconds": remaining
	// is reported at the per-minute scale (the window's fraction left
	// times the limit) and reset is the window's end. Zero refills
	// continuously, as OpenAI and Anthropic do.
	Window time.Duration
	// TPMStart is the token buckets' level (TPM's and OutputTPM's) at
	// start and after Reset, as a fraction of full: an account partly
	// spent before the run. Zero (or 1 and above) means full.
	TPMStart float64
	// MaxOutputTokens is the most output tokens a chat request may ask
	// for (max_tokens, max_completion_tokens): a model's limit. A request
	// asking more, or a value that is not a whole number, is answered 400
	// as OpenAI answers it. Zero means 2^31−1.
	MaxOutputTokens int
	// Slots makes the provider a server with a knee, as a self-hosted model
	// server is (vLLM's batch slots): a request's latency is Latency ×
	// max(1, in service ÷ Slots), the requests in service counted as it
	// arrives, so completions a second grow with concurrency up to Slots
	// and stay flat past it while every request waits longer. Zero: no
	// knee. SetSlots changes it while serving.
	Slots int
	// FlexUnavailable is the share of flex requests, 0..1, answered 429
	// Resource Unavailable, as OpenAI answers when flex processing lacks
	// capacity (see SetFlexUnavailable, which changes it while serving).
	// Zero: flex always has capacity.
	FlexUnavailable float64
	// Dialect is the OpenAI-compatible host whose words the OpenAI paths
	// speak (dialects.go): its rate-limit headers, its buckets' spans,
	// DeepSeek's keep-alives. Zero: OpenAI's.
	Dialect Dialect
	// KeepAlive is how often DialectDeepSeek fills a queued request's
	// wait with a keep-alive. Zero means DefaultKeepAlive.
	KeepAlive time.Duration
	// OverCapacity is the share of requests, 0..1, the rate limit admits
	// that are answered 503 because the model is over capacity (see
	// SetOverCapacity, which changes it while serving). Zero: never.
	OverCapacity float64
	// WSMaxAge is how long a WebSocket (a Responses socket, a Realtime
	// session) may stay open, as OpenAI's last at most 60 minutes: at
	// that age the provider sends an error event
	// (websocket_connection_limit_reached; session_expired in Realtime)
	// and closes with 1000. It is checked on a timer and, by Config.Now,
	// on each client event. Zero means DefaultWSMaxAge.
	WSMaxAge time.Duration
	// WSMaxMessageBytes bounds one client message on a WebSocket; a
	// larger one closes the socket with 1009 (message too big). Zero means
	// DefaultWSMaxMessageBytes.
	WSMaxMessageBytes int64
	// RequestIDPrefix begins the provider's id for each answer
	// (x-request-id, Anthropic's request-id), before the arrival's
	// number: fakes standing for several accounts behind one proxy give
	// ids a test tells apart. Empty means "req_".
	RequestIDPrefix string
	// RecordBodies keeps each request body in the request log.
	RecordBodies bool
	// NoLog keeps no request log (Requests returns none; Stats and
	// Arrivals still count): a long-running provider's memory stays flat.
	NoLog bool
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// ModelLimits are one model's own limits (Config.Models); zero fields are
// unlimited.
type ModelLimits struct {
	Name                string // the model field, Azure deployment or Gemini path's model, exactly
	RPM, TPM, OutputTPM int
	// NoQuota refuses every request for the model 429, as Gemini refuses
	// a model the account's tier has no quota for: RESOURCE_EXHAUSTED
	// with a quotaValue of "0" (geminierrors.go).
	NoQuota bool
}

// DefaultConfig returns the configuration cmd/fakeprovider starts from.
func DefaultConfig() Config {
	return Config{
		Latency:           50 * time.Millisecond,
		StreamChunks:      DefaultStreamChunks,
		ChunkInterval:     20 * time.Millisecond,
		WSMaxAge:          DefaultWSMaxAge,
		WSMaxMessageBytes: DefaultWSMaxMessageBytes,
	}
}

// Validate reports every negative field at once. It changes nothing.
func (c Config) Validate() error {
	var errs []error
	check := func(name string, bad bool, v any) {
		if bad {
			errs = append(errs, fmt.Errorf("fakeprovider: %s must not be negative, got %v", name, v))
		}
	}
	check("latency", c.Latency < 0, c.Latency)
	check("stream_chunks", c.StreamChunks < 0, c.StreamChunks)
	check("chunk_interval", c.ChunkInterval < 0, c.ChunkInterval)
	check("end_lag", c.EndLag < 0, c.EndLag)
	check("rpm", c.RPM < 0, c.RPM)
	check("tpm", c.TPM < 0, c.TPM)
	check("tpm_start", c.TPMStart < 0, c.TPMStart)
	check("output_tpm", c.OutputTPM < 0, c.OutputTPM)
	check("window", c.Window < 0, c.Window)
	check("slots", c.Slots < 0, c.Slots)
	check("ws_max_age", c.WSMaxAge < 0, c.WSMaxAge)
	check("ws_max_message_bytes", c.WSMaxMessageBytes < 0, c.WSMaxMessageBytes)
	check("keep_alive", c.KeepAlive < 0, c.KeepAlive)
	if _, err := ParseDialect(string(c.Dialect)); err != nil {
		errs = append(errs, err)
	}
	if !(c.OverCapacity >= 0 && c.OverCapacity <= 1) {
		errs = append(errs, fmt.Errorf("fakeprovider: over_capacity must be between 0 and 1, got %v", c.OverCapacity))
	}
	if !(c.FlexUnavailable >= 0 && c.FlexUnavailable <= 1) {
		errs = append(errs, fmt.Errorf("fakeprovider: flex_unavailable must be between 0 and 1, got %v", c.FlexUnavailable))
	}
	return errors.Join(errs...)
}

// withDefaults fills zero fields and clamps negative ones to zero, so New
// never fails.
func (c Config) withDefaults() Config {
	c.Latency = max(c.Latency, 0)
	c.ChunkInterval = max(c.ChunkInterval, 0)
	c.EndLag = max(c.EndLag, 0)
	c.RPM = max(c.RPM, 0)
	c.TPM = max(c.TPM, 0)
	c.OutputTPM = max(c.OutputTPM, 0)
	c.Window = max(c.Window, 0)
	c.MaxOutputTokens = max(c.MaxOutputTokens, 0)
	if c.StreamChunks <= 0 {
		c.StreamChunks = DefaultStreamChunks
	}
	if c.WSMaxAge <= 0 {
		c.WSMaxAge = DefaultWSMaxAge
	}
	if c.WSMaxMessageBytes <= 0 {
		c.WSMaxMessageBytes = DefaultWSMaxMessageBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RequestIDPrefix == "" {
		c.RequestIDPrefix = "req_"
	}
	return c
}
