package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
)

// routeKind says how a request is admitted and how its body is carried.
type routeKind uint8

const (
	// routeMetered is every request the windows admit: its body is read
	// whole (bounded) before admission.
	routeMetered routeKind = iota
	// routeBatch submits or manages provider batch jobs, which draw on the
	// provider's separate batch quota: not charged to the windows, and the
	// body (up to 256 MB for Anthropic) streams through.
	routeBatch
	// routeUpload is a file upload (/v1/files, /v1/uploads): not charged
	// to the windows, and the body (up to 500 MB) streams through.
	routeUpload
)

// route is what a request's canonical path says about it, from the
// provider table (pathTable), resolved once: the API whose usage the
// response reports, the path family (error shape and credential header),
// the Azure deployment it names, and how it is admitted.
type route struct {
	api    usage.API
	family family
	// deployment is the Azure deployment an /openai/deployments/{name}/…
	// path names, model the Gemini model a /v1beta/models/{model}:method
	// path names: the model the request is for (modelOf).
	deployment, model string
	kind              routeKind
	// free is the path's row's: nothing on it costs money. generates says
	// the request may cost money (pathTable's rule): it writes (POST, PUT,
	// PATCH) on a path that is not free. inspect sets it, knowing the
	// method.
	free, generates bool
}

// unmetered says the request may cost money on an API whose answers
// meterproxy cannot price: they report no usage it reads.
func (rt route) unmetered() bool { return rt.generates && rt.api == usage.Other }

// writes reports whether method may create something a provider charges
// for: anything but a read (GET, HEAD, OPTIONS) or a delete.
func writes(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete:
		return false
	}
	return true
}

// modelOf is the model a request on rt is for: the Azure deployment or
// the Gemini model its path names, else the model its body names (usage.ReadRequest); none
// when there is neither (a malformed body, GET /v1/models).
func modelOf(rt route, req usage.Request) quota.Model {
	switch {
	case rt.deployment != "":
		return quota.Model{Name: rt.deployment, Deployment: true}
	case rt.model != "":
		return quota.Model{Name: rt.model}
	}
	return quota.Model{Name: req.Model}
}

// streamed reports whether the body streams through instead of being read
// whole before admission.
func (rt route) streamed() bool { return rt.kind != routeMetered }

// errNonCanonicalPath means a path a normalising hop (a CDN, nginx) or the
// upstream could read as another: dot segments, empty segments, encoded
// slashes or backslashes.
var errNonCanonicalPath = errors.New("proxy: non-canonical request path")

// errBadDeployment means an Azure deployment segment that the provider
// could read as another name than the proxy's pool does
// (usage.ValidDeployment): a trailing dot, a ";params" suffix,
// percent-encoding. It is a non-canonical path.
var errBadDeployment = fmt.Errorf("%w: Azure deployment name", errNonCanonicalPath)

// errBadModel means a Gemini model segment (/v1beta/models/{model}:method)
// that is not a name usage.ValidDeployment accepts, spelt as it is: the
// provider could read another model than the proxy's pool does.
var errBadModel = fmt.Errorf("%w: Gemini model name", errNonCanonicalPath)

// routeOf resolves r's route from its path, after checking that the path is
// canonical: it starts with "/", has no "." or ".." segment, no empty
// segment ("//") but a single trailing slash, carries no slash or
// backslash in any form ("%2F", "%5C", "\") and no ";" (path parameters,
// which some hops strip and others keep). A single trailing slash is
// accepted and ignored, so /v1/chat/completions/ is metered as
// /v1/chat/completions. An Azure deployment segment must be a name
// usage.ValidDeployment accepts, spelt without percent-encoding
// (errBadDeployment); so must a Gemini model segment (errBadModel).
func routeOf(u *url.URL) (route, error) {
	p := u.Path
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\;") || hasEncodedSeparator(u.EscapedPath()) {
		return route{}, errNonCanonicalPath
	}
	p = strings.TrimSuffix(p, "/")
	for seg := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if seg == "" && p != "" || seg == "." || seg == ".." {
			return route{}, errNonCanonicalPath
		}
	}
	row, dep, _ := lookup(p)
	rt := route{api: row.api, family: row.family, kind: row.kind, free: row.free}
	if dep != "" && row.family == familyGemini {
		if !usage.ValidDeployment(dep) || !strings.Contains(u.EscapedPath(), "/models/"+dep+":") {
			return route{}, errBadModel
		}
		rt.model = dep
		return rt, nil
	}
	if dep != "" {
		// The escaped path must spell the name as it is: "gpt%2D4o" is
		// gpt-4o here and perhaps not at the provider.
		if !usage.ValidDeployment(dep) || !under(u.EscapedPath(), "/openai/deployments/"+dep) {
			return route{}, errBadDeployment
		}
		rt.deployment = dep
	}
	return rt, nil
}

// under reports whether path is prefix or lies below it, segment-wise:
// /v1/batches/abc is under /v1/batches, /v1/batchesX is not.
func under(path, prefix string) bool {
	rest, ok := strings.CutPrefix(path, prefix)
	return ok && (rest == "" || rest[0] == '/')
}

// hasEncodedSeparator reports whether an escaped path encodes a slash or a
// backslash (%2F, %5C, either case), which decode into separators at some
// hops and not at others.
func hasEncodedSeparator(escaped string) bool {
	for i := 0; i+2 < len(escaped); i++ {
		if escaped[i] != '%' {
			continue
		}
		switch strings.ToUpper(escaped[i+1 : i+3]) {
		case "2F", "5C":
			return true
		}
	}
	return false
}
