// Command fakeprovider serves the fake OpenAI- and Anthropic-compatible
// LLM provider of package test/fakeprovider on a local port, for demos and
// benchmarks of meterproxy. It stops gracefully on SIGINT or SIGTERM.
//
// Usage:
//
//	fakeprovider -listen :8081 -latency 50ms -chunks 5 -chunk-interval 20ms -rpm 0 -tpm 0
//
// With -enforce-tpm the token limit is one (requests charged as the
// provider charges them, 429 past it); -model gives a model or an Azure
// deployment limits of its own (repeat it); -window refills the buckets in
// fixed windows, as Azure does:
//
//	fakeprovider -rpm 600 -tpm 60000 -enforce-tpm -window 10s \
//	    -model gpt-4o:rpm=300,tpm=30000 -model gpt-4o-mini:tpm=100000
//
// -dialect speaks an OpenAI-compatible host's rate-limit headers on the
// OpenAI paths (together, fireworks, mistral, groq; deepseek sends none
// and keeps a queued request open with keep-alives every -keep-alive);
// -over-capacity answers a share of requests 503, the model over capacity:
//
//	fakeprovider -dialect together -rpm 600 -tpm 60000 -over-capacity 0.1
//
// It serves the Responses API over WebSocket (GET /v1/responses with
// Upgrade: websocket) and Realtime sessions (GET /v1/realtime?model=…)
// as well; -ws-max-age bounds how long a socket stays open (60 minutes,
// as OpenAI's) and -ws-max-message the size of a client message. On
// shutdown open sockets are closed with 1001.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// shutdownGrace bounds how long open streams may take to finish on
// shutdown before their connections are closed.
const shutdownGrace = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, listen, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("fakeprovider: listen: %w", err)
	}
	provider := fakeprovider.New(cfg)
	srv := &http.Server{
		Handler:           provider,
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Info("listening", "addr", ln.Addr().String(), "rpm", cfg.RPM, "tpm", cfg.TPM, "enforce_tpm", cfg.EnforceTPM,
		"window", cfg.Window, "models", len(cfg.Models), "slots", cfg.Slots, "dialect", string(cfg.Dialect), "over_capacity", cfg.OverCapacity,
		"latency", cfg.Latency, "chunks", cfg.StreamChunks, "chunk_interval", cfg.ChunkInterval,
		"ws_max_age", cfg.WSMaxAge, "ws_max_message_bytes", cfg.WSMaxMessageBytes)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("fakeprovider: serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting_down")
	sctx, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), shutdownGrace,
		errors.New("fakeprovider: shutdown grace period over"))
	defer cancel()
	err = srv.Shutdown(sctx)
	provider.CloseSockets() // Shutdown leaves hijacked connections alone
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("fakeprovider: shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("fakeprovider: serve: %w", err)
	}
	return nil
}

// parseFlags reads the command line into a provider config and a listen
// address.
func parseFlags(args []string, stderr io.Writer) (fakeprovider.Config, string, error) {
	cfg := fakeprovider.DefaultConfig()
	cfg.NoLog = true // nothing reads the log of a provider run as a program
	fs := flag.NewFlagSet("fakeprovider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8081", "address to listen on")
	fs.DurationVar(&cfg.Latency, "latency", cfg.Latency, "delay before response headers")
	fs.IntVar(&cfg.StreamChunks, "chunks", cfg.StreamChunks, "content chunks per SSE stream")
	fs.DurationVar(&cfg.ChunkInterval, "chunk-interval", cfg.ChunkInterval, "pause between SSE chunks")
	fs.DurationVar(&cfg.EndLag, "end-lag", cfg.EndLag, "pause between a stream's last event and its end (0 = none)")
	fs.IntVar(&cfg.RPM, "rpm", cfg.RPM, "requests per minute limit (0 = unlimited)")
	fs.IntVar(&cfg.TPM, "tpm", cfg.TPM, "tokens per minute reported in headers (0 = not reported)")
	fs.BoolVar(&cfg.EnforceTPM, "enforce-tpm", cfg.EnforceTPM, "enforce -tpm (and -output-tpm): charge each request as its provider does, answer 429 past it")
	fs.IntVar(&cfg.OutputTPM, "output-tpm", cfg.OutputTPM, "Anthropic's output tokens per minute, with -enforce-tpm (0 = output charged to -tpm)")
	fs.IntVar(&cfg.Slots, "slots", cfg.Slots, "a server with a knee: latency × max(1, requests in service ÷ slots), as a self-hosted model server's batch slots (0 = no knee)")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "refill the buckets in fixed windows of this length, as Azure does (0 = continuously)")
	fs.Func("model", "a model's (or Azure deployment's) own limits, NAME:rpm=N,tpm=N,output-tpm=N (any of them; repeat the flag per model), or NAME:no-quota, a Gemini model the tier has no quota for (every request 429, quota 0)", func(v string) error {
		m, err := parseModel(v)
		cfg.Models = append(cfg.Models, m)
		return err
	})
	fs.DurationVar(&cfg.WSMaxAge, "ws-max-age", cfg.WSMaxAge, "how long a WebSocket (Responses or Realtime) may stay open; then an error event and close 1000, as OpenAI's 60 minutes")
	fs.Int64Var(&cfg.WSMaxMessageBytes, "ws-max-message", cfg.WSMaxMessageBytes, "largest client message on a WebSocket, in bytes; larger closes it with 1009")
	fs.Func("dialect", "the OpenAI-compatible host whose rate-limit headers and habits the OpenAI paths speak: openai, together, fireworks, mistral, groq or deepseek", func(v string) error {
		d, err := fakeprovider.ParseDialect(v)
		cfg.Dialect = d
		return err
	})
	fs.DurationVar(&cfg.KeepAlive, "keep-alive", cfg.KeepAlive, "with -dialect deepseek, how often a queued request's wait is filled with a keep-alive (0 = 1s)")
	fs.Float64Var(&cfg.OverCapacity, "over-capacity", cfg.OverCapacity, "share of requests (0..1) answered 503 because the model is over capacity, as Together answers (0 = none)")
	fs.IntVar(&cfg.MaxOutputTokens, "max-output-tokens", cfg.MaxOutputTokens, "most output tokens a chat request may ask for; more is answered 400 (0 = 2^31-1)")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("fakeprovider: unexpected arguments %q", fs.Args())
	}
	return cfg, *listen, cfg.Validate()
}

// parseModel reads one -model value, NAME:rpm=N,tpm=N,output-tpm=N, where
// each limit is optional and 0 (or absent) means unlimited; no-quota
// among them is ModelLimits.NoQuota.
func parseModel(v string) (fakeprovider.ModelLimits, error) {
	name, limits, _ := strings.Cut(v, ":")
	m := fakeprovider.ModelLimits{Name: name}
	if name == "" {
		return m, fmt.Errorf("fakeprovider: -model %q: want NAME:rpm=N,tpm=N,output-tpm=N", v)
	}
	if limits == "" {
		return m, nil
	}
	for kv := range strings.SplitSeq(limits, ",") {
		if kv == "no-quota" {
			m.NoQuota = true
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("fakeprovider: -model %q: %q is not KEY=N with N >= 0", v, kv)
		}
		switch k {
		case "rpm":
			m.RPM = n
		case "tpm":
			m.TPM = n
		case "output-tpm":
			m.OutputTPM = n
		default:
			return m, fmt.Errorf("fakeprovider: -model %q: unknown limit %q (rpm, tpm or output-tpm)", v, k)
		}
	}
	return m, nil
}
