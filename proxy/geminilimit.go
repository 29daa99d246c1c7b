package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
)

// Gemini sends no rate-limit headers: its 429 says what it means in its
// body (ratelimit.ParseGoogleError). A RetryInfo's retryDelay is the
// provider's word on when to come back, taken as a Retry-After would be
// (observe: the pool is held for it). A QuotaFailure whose quotaValue is
// "0" says the account's tier has no quota for the model at all: no wait
// brings any, so nothing is held, the answer is no rate limit for the
// adaptive bound (exchange.answer), and the caller gets meterproxy's own
// refusal, no_quota_for_model, naming the model, in its API's shape
// (noQuotaAnswer) — unless another account takes the request (spillTo),
// or under mode: shadow, where the provider's answer passes as sent. Only
// the answer to a request that spent this account is read (observe): a
// caller's own key's 429 passes as sent.

// reasonNoQuotaForModel: the account's Gemini tier has no quota for the
// request's model (Google's 429 with a quota of 0); nothing is held.
const reasonNoQuotaForModel = "no_quota_for_model"

// fromGoogle says ex's answer may be Google's: its account's dialect is
// Gemini, or its path is one of Gemini's families (a gateway named
// openai-compatible in front of Gemini passes Google's 429 on as sent).
func (ex *exchange) fromGoogle() bool {
	return ex.dialect == dialectGemini || families[ex.rt.family].dialect == dialectGemini
}

// googleLimitOf reads what resp, a Gemini 429, says in its body (its
// first ratelimit.MaxGoogleError bytes); resp's body reads whole
// afterwards all the same.
func googleLimitOf(resp *http.Response) (ratelimit.GoogleLimit, bool) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return ratelimit.GoogleLimit{}, false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, ratelimit.MaxGoogleError))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), errReader{err}, resp.Body), resp.Body}
	if err != nil {
		return ratelimit.GoogleLimit{}, false
	}
	return ratelimit.ParseGoogleError(head)
}

// heedGoogle is observe's reading of a Gemini 429 to ex's request: the
// retry delay its body gives obs when no header gave one, and whether
// it says the tier has no quota for the model (ex.dest.noQuota), which
// holds nothing.
func heedGoogle(resp *http.Response, ex *exchange, obs *ratelimit.Observation) (noQuota bool) {
	lim, ok := googleLimitOf(resp)
	switch {
	case !ok:
		return false
	case lim.NoQuota:
		ex.dest.noQuota = &lim
		return true
	case lim.RetryDelay > 0 && obs.RetryAfter < 0:
		obs.RetryAfter = lim.RetryDelay
	}
	return false
}

// noQuotaAnswer is the answer passed on in place of resp, the Gemini 429
// of ex's account saying its tier has no quota for the model: meterproxy's
// refusal no_quota_for_model in the shape of ex's API, not to be retried.
// resp is drained.
func noQuotaAnswer(resp *http.Response, ex *exchange) *http.Response {
	drain(resp)
	lim := ex.dest.noQuota
	model := lim.Model
	if model == "" {
		model = bounded(ex.ask.model.Name, maxNamedPath)
	}
	f := refusal{status: http.StatusTooManyRequests, reason: reasonNoQuotaForModel, kind: "insufficient_quota",
		message: fmt.Sprintf("meterproxy: the Gemini account's tier has no quota for model %q (quota %s has a limit of 0), and waiting brings none: "+
			"use another model, or an account whose tier has quota for it", model, lim.QuotaID)}
	ex.rec.refuse(f.reason)
	w := &answerWriter{resp: &http.Response{StatusCode: f.status, Header: http.Header{}, Proto: resp.Proto,
		ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor, Request: resp.Request}}
	f.write(w, ex.errorShape())
	w.resp.Body, w.resp.ContentLength = io.NopCloser(&w.body), int64(w.body.Len())
	return w.resp
}

// answerWriter is an http.ResponseWriter that writes an http.Response:
// a refusal passed on as the upstream's answer.
type answerWriter struct {
	resp *http.Response
	body bytes.Buffer
}

func (w *answerWriter) Header() http.Header         { return w.resp.Header }
func (w *answerWriter) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *answerWriter) WriteHeader(status int)      { w.resp.StatusCode = status }
