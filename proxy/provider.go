package proxy

import (
	"net/url"
	"strings"

	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/proxy/usage"
)

// The provider table: what the proxy knows of a request from its path and
// from upstream.provider, written once. Two things are told apart:
//
//   - The path says what the caller's SDK speaks (its family, from
//     pathTable): the API whose usage the response reports, where the
//     model is named (an Azure deployment in the path, else the body),
//     the error shape a refusal is written in, the header a provider key
//     goes in for a caller that sent none, and how the request is
//     admitted (metered, batch, upload). A gateway in front of another
//     provider still answers the caller's SDK in the SDK's own terms.
//   - upstream.provider says whose accounting the request falls under:
//     its dialect, which decides how tokens are charged and how buckets
//     refill. Named, it holds for every path (provider: anthropic with
//     /v1/chat/completions is Anthropic's OpenAI-compatible endpoint,
//     charged as Anthropic charges). With auto, a path of Anthropic's or
//     Azure's family is that provider's, and any other is told by
//     upstream.url's host (upstreamProvider).
//
// The handler resolves a request against both once (upstreamProvider.
// resolve, into an endpoint), and every consumer reads that value.

// family is a path family: the wire protocol of the caller's SDK.
type family uint8

const (
	// familyOpenAI is OpenAI's API as OpenAI and every OpenAI-compatible
	// server (vLLM, Groq, a gateway) serve it: every path not below.
	familyOpenAI family = iota
	// familyAzure is Azure OpenAI's API: paths under /openai.
	familyAzure
	// familyAnthropic is Anthropic's API: /v1/messages and /v1/complete,
	// and paths below them.
	familyAnthropic
	// familyGeminiOpenAI is Gemini's OpenAI-compatible endpoint: paths
	// under /v1beta/openai, OpenAI's API in OpenAI's words (its errors,
	// Authorization: Bearer, usage) at Google.
	familyGeminiOpenAI
	// familyGemini is Google's Gemini API: every other path under
	// /v1beta, and /v1/models/{model}:{method} (generateContent and the
	// rest of the model's methods).
	familyGemini
)

// errorShape is the shape of an error body (see refusal.write).
type errorShape uint8

const (
	// shapeOpenAI is {"error":{"message","type","code"}}, OpenAI's and
	// Azure's.
	shapeOpenAI errorShape = iota
	// shapeAnthropic is {"type":"error","error":{"type","message"}}.
	shapeAnthropic
	// shapeGoogle is Google's {"error":{"code","message","status"}}
	// (google.rpc.Status).
	shapeGoogle
)

// familyFacts are what a family says of every request on its paths.
type familyFacts struct {
	// errors is the shape of the family's error bodies.
	errors errorShape
	// keyHeader is the header a provider key goes in for a caller that
	// sent none (replaceCredential): the one the family's API reads a key
	// from (Azure's deployment API reads a resource key from api-key only).
	keyHeader string
	// dialect is the family's provider under upstream.provider auto; byHost
	// says the family has none of its own, and upstream.url's host tells.
	dialect dialect
	byHost  bool
}

// families is the family table.
var families = [...]familyFacts{
	familyOpenAI:       {errors: shapeOpenAI, keyHeader: "Authorization", byHost: true},
	familyAzure:        {errors: shapeOpenAI, keyHeader: "Api-Key", dialect: dialectAzure},
	familyAnthropic:    {errors: shapeAnthropic, keyHeader: "X-Api-Key", dialect: dialectAnthropic},
	familyGeminiOpenAI: {errors: shapeOpenAI, keyHeader: "Authorization", dialect: dialectGemini},
	familyGemini:       {errors: shapeGoogle, keyHeader: "X-Goog-Api-Key", dialect: dialectGemini},
}

// pathRow is one row of pathTable: the paths it matches and what they are.
type pathRow struct {
	// pattern is a path, segment by segment; the segment {deployment}
	// matches any one segment, an Azure deployment: the model the request
	// is for (modelOf); {model}:method matches a segment that ends in
	// :method, the Gemini model before the colon being the model the
	// request is for; {id} matches any one segment (an object's id).
	pattern string
	// below says the row also matches every path below pattern.
	below  bool
	family family
	api    usage.API
	kind   routeKind
	// free says a request on the row's paths costs nothing, whatever its
	// method (see generates).
	free bool
}

// The pattern segments that match any one segment.
const (
	deploymentSegment = "{deployment}"
	modelSegment      = "{model}"
	idSegment         = "{id}"
)

// pathTable is every path family's paths, the first matching row winning;
// a path that matches none is OpenAI's family, API usage.Other, metered.
// An API other than usage.Other is metered as it reports usage; the model
// is the {deployment} segment where the row has one, else the body's.
//
// Which requests cost money — generate — is the rule budgets enforce
// (route.generates): a POST, PUT or PATCH does, on any path whose row is
// not free; a GET, HEAD, OPTIONS or DELETE never does (it reads or
// deletes what exists: a list of models or files, a stored response). Free
// rows are the writes the providers do not charge: counting tokens
// (Anthropic's count_tokens, OpenAI's /v1/responses/input_tokens),
// cancelling a background response, updating a stored chat completion's
// metadata, moderations, uploading files, adding to a conversation. A
// path no row names is never free: a POST there is an API meterproxy
// cannot price (images, audio, realtime calls over WebRTC, fine-tuning,
// Assistants runs, Anthropic's legacy /v1/complete), which a budget
// refuses unless its unpriced_apis is worst_case. A Realtime session's
// path (/v1/realtime, Azure's /openai/realtime and /openai/v1/realtime)
// is metered over its WebSocket, response by response. Batches and uploads stream past
// admission (routeBatch, routeUpload) and meet no budget.
var pathTable = []pathRow{
	{pattern: "/v1/chat/completions", api: usage.ChatCompletions},
	{pattern: "/v1/chat/completions", below: true, api: usage.Other, free: true}, // stored completions
	{pattern: "/v1/completions", api: usage.Completions},
	{pattern: "/v1/responses", api: usage.Responses},
	{pattern: "/v1/responses/input_tokens", api: usage.Other, free: true},
	{pattern: "/v1/responses/{id}/cancel", api: usage.Other, free: true},
	{pattern: "/v1/embeddings", api: usage.Embeddings},
	{pattern: "/v1/realtime", api: usage.Realtime}, // a WebSocket (socketrealtime.go); its HTTP paths below it are Other
	{pattern: "/v1/moderations", api: usage.Other, free: true},
	{pattern: "/v1/conversations", below: true, api: usage.Other, free: true},
	{pattern: "/v1/batches", below: true, api: usage.Other, kind: routeBatch},
	{pattern: "/v1/files", below: true, api: usage.Other, kind: routeUpload},
	{pattern: "/v1/uploads", below: true, api: usage.Other, kind: routeUpload},
	{pattern: "/v1/messages", family: familyAnthropic, api: usage.Messages},
	{pattern: "/v1/messages/batches", below: true, family: familyAnthropic, api: usage.Other, kind: routeBatch},
	{pattern: "/v1/messages/count_tokens", family: familyAnthropic, api: usage.Other, free: true},
	{pattern: "/v1/messages", below: true, family: familyAnthropic, api: usage.Other},
	{pattern: "/v1/complete", below: true, family: familyAnthropic, api: usage.Other},
	{pattern: "/openai/v1/chat/completions", family: familyAzure, api: usage.ChatCompletions},
	{pattern: "/openai/v1/completions", family: familyAzure, api: usage.Completions},
	{pattern: "/openai/v1/responses", family: familyAzure, api: usage.Responses},
	{pattern: "/openai/v1/responses/{id}/cancel", family: familyAzure, api: usage.Other, free: true},
	{pattern: "/openai/v1/embeddings", family: familyAzure, api: usage.Embeddings},
	{pattern: "/openai/v1/realtime", family: familyAzure, api: usage.Realtime},
	{pattern: "/openai/v1/files", below: true, family: familyAzure, api: usage.Other, free: true},
	{pattern: "/openai/responses", family: familyAzure, api: usage.Responses},
	{pattern: "/openai/realtime", family: familyAzure, api: usage.Realtime},
	{pattern: "/openai/responses/{id}/cancel", family: familyAzure, api: usage.Other, free: true},
	{pattern: "/openai/files", below: true, family: familyAzure, api: usage.Other, free: true},
	{pattern: "/openai/deployments/{deployment}/chat/completions", family: familyAzure, api: usage.ChatCompletions},
	{pattern: "/openai/deployments/{deployment}/completions", family: familyAzure, api: usage.Completions},
	{pattern: "/openai/deployments/{deployment}/embeddings", family: familyAzure, api: usage.Embeddings},
	{pattern: "/openai/deployments/{deployment}", below: true, family: familyAzure, api: usage.Other},
	{pattern: "/openai", below: true, family: familyAzure, api: usage.Other},
	{pattern: "/v1beta/openai/chat/completions", family: familyGeminiOpenAI, api: usage.ChatCompletions},
	{pattern: "/v1beta/openai/embeddings", family: familyGeminiOpenAI, api: usage.Embeddings},
	{pattern: "/v1beta/openai", below: true, family: familyGeminiOpenAI, api: usage.Other},
	{pattern: "/v1beta/models/{model}:generateContent", family: familyGemini, api: usage.GenerateContent},
	{pattern: "/v1beta/models/{model}:streamGenerateContent", family: familyGemini, api: usage.GenerateContent},
	{pattern: "/v1beta/models/{model}:countTokens", family: familyGemini, api: usage.Other, free: true},
	{pattern: "/v1beta/models/{model}:embedContent", family: familyGemini, api: usage.EmbedContent},
	{pattern: "/v1beta/models/{model}:batchEmbedContents", family: familyGemini, api: usage.EmbedContent},
	{pattern: "/v1beta", below: true, family: familyGemini, api: usage.Other},
	{pattern: "/v1/models/{model}:generateContent", family: familyGemini, api: usage.GenerateContent},
	{pattern: "/v1/models/{model}:streamGenerateContent", family: familyGemini, api: usage.GenerateContent},
	{pattern: "/v1/models/{model}:countTokens", family: familyGemini, api: usage.Other, free: true},
	{pattern: "/v1/models/{model}:embedContent", family: familyGemini, api: usage.EmbedContent},
	{pattern: "/v1/models/{model}:batchEmbedContents", family: familyGemini, api: usage.EmbedContent},
}

// lookup is the row of pathTable that path (without a trailing slash)
// matches, and the model it names (an Azure deployment, a Gemini model);
// ok is false when no row does.
func lookup(path string) (row pathRow, model string, ok bool) {
	for _, row := range pathTable {
		if model, ok := row.match(path); ok {
			return row, model, true
		}
	}
	return pathRow{api: usage.Other}, "", false
}

// match reports whether path is row's, and the model it names where the
// pattern has {deployment} or {model}:method.
func (row pathRow) match(path string) (model string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return "", false
	}
	more := true // rest is what follows a "/" of path
	for want := range strings.SplitSeq(row.pattern[1:], "/") {
		if !more {
			return "", false
		}
		var got string
		got, rest, more = strings.Cut(rest, "/")
		method, named := strings.CutPrefix(want, modelSegment)
		switch {
		case want == deploymentSegment && got != "":
			model = got
		case named && method != "" && len(got) > len(method) && strings.HasSuffix(got, method):
			model = strings.TrimSuffix(got, method)
		case want == idSegment && got != "":
		case want != got:
			return "", false
		}
	}
	return model, !more || row.below
}

// familyOf is the family of a path, canonical or not: a refusal given
// before the path is checked still takes the shape of the API it names.
func familyOf(path string) family {
	row, _, _ := lookup(strings.TrimSuffix(path, "/"))
	return row.family
}

// Provider is upstream.provider: the provider behind upstream.url, which
// decides how tokens are charged and buckets refill (the dialect) for
// every path. auto tells it from each request's path family and the
// upstream's host (upstreamProvider); set it when the upstream is a
// gateway in front of one provider. It never changes what a path speaks
// (its family): the error shape, the credential header, where usage and
// the model are read.
type Provider string

// ProviderAuto is upstream.provider's default.
const ProviderAuto Provider = "auto"

// dialect is p's dialect, and false for auto.
func (p Provider) dialect() (dialect, bool) {
	for d, name := range dialectNames {
		if string(p) == name {
			return dialect(d), true
		}
	}
	return 0, false
}

// providers are the upstream.provider values.
var providers = []Provider{ProviderAuto, "openai", "azure", "anthropic", "openai-compatible", "gemini"}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another provider is refused at load, by key.
func (p *Provider) UnmarshalText(b []byte) error { return configcheck.SetOneOf(p, b, providers...) }

// upstreamProvider is what upstream.provider and upstream.url say of every
// request, resolved once when the handler is built: the dialect itself
// when the provider is named, else the host's, which a path family with a
// provider of its own overrides.
type upstreamProvider struct {
	host  dialect
	named bool
}

// newUpstreamProvider resolves p and upstream's host.
func newUpstreamProvider(p Provider, upstream *url.URL) upstreamProvider {
	if d, ok := p.dialect(); ok {
		return upstreamProvider{host: d, named: true}
	}
	host := strings.ToLower(upstream.Hostname())
	switch {
	case strings.HasSuffix(host, ".openai.azure.com"):
		return upstreamProvider{host: dialectAzure}
	case host == "api.openai.com":
		return upstreamProvider{host: dialectOpenAI}
	case host == "api.anthropic.com":
		return upstreamProvider{host: dialectAnthropic}
	case host == "generativelanguage.googleapis.com":
		return upstreamProvider{host: dialectGemini}
	default:
		return upstreamProvider{host: dialectCompatible}
	}
}

// endpoint is a request resolved against the provider table once: what
// its path speaks (rt), whose accounting it falls under (dialect), and
// the accounts that serve its family (among: nil for every account;
// unserved when none does, served.go).
type endpoint struct {
	rt       route
	dialect  dialect
	among    []string
	unserved bool
}

// resolve is the endpoint of a request on rt: the named provider's
// dialect, else its family's own provider's, else the host's.
func (u upstreamProvider) resolve(rt route) endpoint {
	ep := endpoint{rt: rt, dialect: u.host}
	if f := families[rt.family]; !u.named && !f.byHost {
		ep.dialect = f.dialect
	}
	return ep
}

// errorShape is the shape of the error bodies of ep's API.
func (ep endpoint) errorShape() errorShape { return families[ep.rt.family].errors }

// credential is the header ep's API reads a key from, for a caller that
// sent none.
func (ep endpoint) credential() string { return families[ep.rt.family].keyHeader }

// doubledPrefix is the path prefix the proxy would double on upstream —
// "/v1", for Azure "/openai", for Gemini "/v1beta/openai" or "/v1beta" —
// when upstream's path ends in it, else "". The proxy appends the
// caller's path whole (the SDK's base URL points at the proxy, so paths
// arrive as /v1/chat/completions, /openai/deployments/… or
// /v1beta/openai/chat/completions), so the provider's own base URL
// (https://api.openai.com/v1,
// https://generativelanguage.googleapis.com/v1beta/openai/) doubles it.
// "/openai" is a prefix of its own only on Azure: an OpenAI-compatible
// server may live under one (Groq's https://api.groq.com/openai is right
// as written); "/v1beta" only on Gemini.
func doubledPrefix(upstream *url.URL, p Provider) string {
	path := strings.TrimRight(upstream.Path, "/")
	host := newUpstreamProvider(p, upstream).host
	switch {
	case strings.HasSuffix(path, "/v1"):
		return "/v1"
	case strings.HasSuffix(path, "/v1beta/openai") && host == dialectGemini:
		return "/v1beta/openai"
	case strings.HasSuffix(path, "/v1beta") && host == dialectGemini:
		return "/v1beta"
	case strings.HasSuffix(path, "/openai") && host == dialectAzure:
		return "/openai"
	}
	return ""
}
