package ratelimit

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Google's Gemini API sends no rate-limit headers. Its 429 says what it
// means in the body, Google's error shape (google.rpc.Status):
//
//	{"error": {"code": 429, "message": "…", "status": "RESOURCE_EXHAUSTED", "details": [
//	  {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
//	    {"quotaMetric": "…", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
//	     "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"}, "quotaValue": "15"}]},
//	  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "47s"}]}}
//
// and its OpenAI-compatible endpoint sends the same object wrapped in a
// JSON array, [{"error": {…}}]. RetryInfo's retryDelay is a protobuf
// Duration in JSON: decimal seconds and an "s". A violation whose
// quotaValue is "0" is a tier without any quota for the model (the
// message says "limit: 0"): no wait brings one.

// MaxGoogleError bounds the error body ParseGoogleError reads: Google's
// are well under a kilobyte; what lies past it is not read.
const MaxGoogleError = 16 << 10

// Bounds of what ParseGoogleError walks, so a hostile body costs little.
const (
	maxGoogleDetails    = 16
	maxGoogleViolations = 16
	maxGoogleName       = 128
)

// GoogleLimit is what a Google RESOURCE_EXHAUSTED error body says of the
// limit it hit. The zero value says nothing.
type GoogleLimit struct {
	// RetryDelay is RetryInfo's retryDelay, within [0, MaxDuration]; 0
	// when the body has none (or one unreadable).
	RetryDelay time.Duration
	// NoQuota says a violated quota's value is 0: the account's tier has
	// no quota for the model at all, and waiting brings none.
	NoQuota bool
	// Model and QuotaID are that violation's quotaDimensions.model and
	// quotaId (the first violation's when none is 0), each at most
	// maxGoogleName bytes of ASCII letters, digits and - _ . : / @ +, any
	// other byte replaced by '_'; "" when absent.
	Model, QuotaID string
}

// ParseGoogleError reads body, a Google error body or the same wrapped in
// a JSON array (at most its first MaxGoogleError bytes are read), and
// reports what its limit says; ok is false unless it is an error of
// status RESOURCE_EXHAUSTED or code 429. What it does not know is
// unknown: a detail of another type, a delay that is not a Duration, a
// quotaValue that is not a string are skipped. It is pure and safe for
// concurrent use.
func ParseGoogleError(body []byte) (l GoogleLimit, ok bool) {
	body = body[:min(len(body), MaxGoogleError)]
	doc := gjson.ParseBytes(body)
	if doc.IsArray() {
		doc = doc.Get("0")
	}
	e := doc.Get("error")
	if !e.IsObject() || (e.Get("status").String() != "RESOURCE_EXHAUSTED" && e.Get("code").Int() != 429) {
		return GoogleLimit{}, false
	}
	n := 0
	e.Get("details").ForEach(func(_, d gjson.Result) bool {
		n++
		typ := d.Get(`\@type`).String()
		switch {
		case strings.HasSuffix(typ, "google.rpc.RetryInfo"):
			if v := d.Get("retryDelay"); v.Type == gjson.String {
				if delay, ok := protoDuration(v.Str); ok {
					l.RetryDelay = delay
				}
			}
		case strings.HasSuffix(typ, "google.rpc.QuotaFailure"):
			l.violations(d.Get("violations"))
		}
		return n < maxGoogleDetails
	})
	return l, true
}

// violations reads a QuotaFailure's violations: the first one whose
// quotaValue is "0" makes the limit NoQuota and names its model and
// quota; else the first one names them.
func (l *GoogleLimit) violations(vs gjson.Result) {
	n := 0
	vs.ForEach(func(_, v gjson.Result) bool {
		n++
		zero := v.Get("quotaValue").Type == gjson.String && strings.TrimSpace(v.Get("quotaValue").Str) == "0"
		if (zero && !l.NoQuota) || (l.Model == "" && l.QuotaID == "") {
			l.Model = cleanName(v.Get("quotaDimensions.model").String())
			l.QuotaID = cleanName(v.Get("quotaId").String())
		}
		l.NoQuota = l.NoQuota || zero
		return n < maxGoogleViolations
	})
}

// protoDuration reads a protobuf Duration's JSON form: decimal seconds
// followed by "s" ("47s", "0.5s", "1.000340012s"), in [0, MaxDuration].
func protoDuration(v string) (time.Duration, bool) {
	secs, ok := strings.CutSuffix(strings.TrimSpace(v), "s")
	if !ok {
		return 0, false
	}
	return fromDecimal(secs, time.Second)
}

// cleanName is s as GoogleLimit keeps a name: its first maxGoogleName
// bytes, each byte outside the set a model name uses replaced by '_'.
func cleanName(s string) string {
	b := []byte(s[:min(len(s), maxGoogleName)])
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == ':', c == '/', c == '@', c == '+':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
