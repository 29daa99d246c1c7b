package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
)

// sweepPrompt is the prompt of every sweep request: short, so the input
// costs little and the output (up to --max-tokens) is the work measured.
const sweepPrompt = "Write a short paragraph about the sea."

// anthropicVersion is the anthropic-version header Anthropic's Messages
// API requires.
const anthropicVersion = "2023-06-01"

// sweepTarget is the one request a sweep sends over and over: where, with
// which headers and body, and which API's usage its response reports. The
// key lives in header only; nothing prints a sweepTarget's header.
type sweepTarget struct {
	url    string // the request URL, query included
	shown  string // the URL as printed: no userinfo, no query
	api    usage.API
	header http.Header
	body   []byte
}

// newSweepTarget builds the request for base + path: the path decides the
// body's and the key header's shape, as it does for the proxy (OpenAI and
// compatible servers, Azure OpenAI deployments, Anthropic Messages).
func newSweepTarget(base, path, model, key string, maxTokens int) (sweepTarget, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return sweepTarget{}, fmt.Errorf("sweep: upstream URL %q: want http(s)://host[:port]", base)
	}
	p, err := url.Parse(path)
	if err != nil || !strings.HasPrefix(p.Path, "/") || p.Host != "" {
		return sweepTarget{}, fmt.Errorf("sweep: --path %q: want a path such as /v1/chat/completions", path)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + p.Path
	u.RawPath = ""
	u.RawQuery = p.RawQuery
	t := sweepTarget{url: u.String(), header: http.Header{"Content-Type": {"application/json"}}}
	shown := *u
	shown.User, shown.RawQuery = nil, ""
	t.shown = shown.String()
	azure := strings.HasPrefix(p.Path, "/openai/")
	switch {
	case p.Path == "/v1/messages":
		t.api = usage.Messages
		t.header.Set("Anthropic-Version", anthropicVersion)
		setKey(t.header, "X-Api-Key", key)
	case azure && strings.HasSuffix(p.Path, "/chat/completions"):
		t.api = usage.ChatCompletions
		setKey(t.header, "Api-Key", key)
	case strings.HasSuffix(p.Path, "/chat/completions"):
		t.api = usage.ChatCompletions
		if key != "" {
			t.header.Set("Authorization", "Bearer "+key)
		}
	default:
		return sweepTarget{}, fmt.Errorf("sweep: --path %q: want a chat completions path (/v1/chat/completions, "+
			"/openai/deployments/NAME/chat/completions?api-version=…) or Anthropic's /v1/messages", path)
	}
	if model == "" && !strings.HasPrefix(p.Path, "/openai/deployments/") {
		return sweepTarget{}, errors.New("sweep: --model is required: the model every request names")
	}
	t.body, err = json.Marshal(sweepBody{Model: model, MaxTokens: maxTokens,
		Messages: []sweepMessage{{Role: "user", Content: sweepPrompt}}})
	return t, err
}

// setKey sets header name to key, when there is a key.
func setKey(h http.Header, name, key string) {
	if key != "" {
		h.Set(name, key)
	}
}

// sweepBody is the request body: the same fields serve OpenAI's chat
// completions and Anthropic's messages.
type sweepBody struct {
	Model     string         `json:"model,omitempty"`
	Messages  []sweepMessage `json:"messages"`
	MaxTokens int            `json:"max_tokens"`
}

// sweepMessage is one message of sweepBody.
type sweepMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// errRedirectAway refuses a redirect to another host: the key header
// would go with it (Go's client drops Authorization on such a redirect,
// but not Api-Key or X-Api-Key), and the sweep would measure another
// server than the one named.
var errRedirectAway = errors.New("sweep: refused a redirect to another host (scheme, host or port): the key would go with it; sweep the URL it points to instead")

// sameHost is the sweep client's redirect policy: a redirect within the
// first request's scheme, host and port is followed (at most 10, as Go's
// default), one anywhere else refused (errRedirectAway).
func sameHost(req *http.Request, via []*http.Request) error {
	switch first := via[0].URL; {
	case req.URL.Scheme != first.Scheme || req.URL.Host != first.Host:
		return errRedirectAway
	case len(via) >= 10:
		return errors.New("sweep: stopped after 10 redirects")
	}
	return nil
}

// Kinds of outcome besides an HTTP status code.
const (
	kindOK         = ""           // answered 2xx
	kindTimeout    = "timeout"    // no whole answer within --timeout
	kindConnection = "connection" // the transport failed: refused, reset, TLS
	kindCanceled   = "canceled"   // the sweep was interrupted: not the upstream's doing
)

// errRequestTimeout is the cause of a request's deadline, told apart from
// the sweep's own end.
var errRequestTimeout = errors.New("sweep: request timed out")

// outcome is one request's record: when it was sent and ended, how it
// ended (kindOK, an HTTP status code such as "429", or another kind), and
// the usage of a 2xx answer, and the rate limits any answer's headers
// reported. detail is a transport error's text, without the URL.
type outcome struct {
	start, end time.Time
	kind       string
	usage      usage.Usage
	limits     ratelimit.Observation
	detail     string
}

// send sends t once, reads the whole answer through a usage meter, and
// records what happened. A request longer than timeout is a timeout.
func (t sweepTarget) send(ctx context.Context, client *http.Client, timeout time.Duration) outcome {
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errRequestTimeout)
	defer cancel()
	o := outcome{start: time.Now(), limits: ratelimit.Unknown()}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, t.url, bytes.NewReader(t.body))
	if err != nil {
		o.end, o.kind, o.detail = time.Now(), kindConnection, err.Error()
		return o
	}
	req.Header = t.header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		o.end = time.Now()
		o.kind, o.detail = failureKind(ctx, rctx, err)
		return o
	}
	defer func() { _ = resp.Body.Close() }()
	o.limits = ratelimit.ParseMinute(resp.Header, time.Now())
	m := usage.NewMeter(t.api, resp.Header.Get("Content-Type"), usage.EstimateInput(t.body))
	_, err = io.Copy(m, resp.Body)
	o.end = time.Now()
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		o.kind = strconv.Itoa(resp.StatusCode)
	case err != nil:
		o.kind, o.detail = failureKind(ctx, rctx, err)
	default:
		o.usage = m.Finish(true)
	}
	return o
}

// failureKind names a transport error: the sweep's own end, the request's
// timeout, or the connection's failure (with its text, the URL left out
// since a query may carry a secret).
func failureKind(sweep, req context.Context, err error) (kind, detail string) {
	switch {
	case sweep.Err() != nil:
		return kindCanceled, ""
	case errors.Is(context.Cause(req), errRequestTimeout):
		return kindTimeout, ""
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	return kindConnection, err.Error()
}
