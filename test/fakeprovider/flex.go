package fakeprovider

import (
	"math"
	"net/http"
)

// flexUnavailableMessage and flexUnavailableCode are the fake's answer to
// a flex request it has no capacity for: HTTP 429 in OpenAI's error shape,
// with the "Resource Unavailable" OpenAI's flex processing guide names
// ("resulting in a 429 Resource Unavailable error code. You will not be
// charged"), as the code and type and in the message. The guide shows no
// body; the proxy matches any of the three (proxy/flexretry.go).
const (
	flexUnavailableMessage = "Resource Unavailable: there is not enough flex processing capacity for this request right now. " +
		`Retry later, or send it without service_tier "flex" to use the default tier.`
	flexUnavailableCode = "resource_unavailable"
)

// SetFlexUnavailable sets the share of flex requests (OpenAI and Azure
// chat completions and Responses with service_tier "flex"), 0..1, that
// are answered 429 Resource Unavailable from now on (Config.FlexUnavailable
// at start): 1 refuses every one, 0 none, 0.5 every second. The share is
// counted over the flex requests that arrive, not drawn at random, so a
// test knows how many are refused. Requests in service are not affected.
func (p *Provider) SetFlexUnavailable(share float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flexShare, p.flexSeen = clampShare(share), 0
}

// clampShare is share within [0, 1]; NaN is 0.
func clampShare(share float64) float64 {
	if !(share > 0) {
		return 0
	}
	return min(share, 1)
}

// flexRefuses reports whether the next flex request is answered
// unavailable: the refused count floor(seen × share) moved with it.
func (p *Provider) flexRefuses() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flexSeen++
	n := float64(p.flexSeen)
	return math.Floor(n*p.flexShare) > math.Floor((n-1)*p.flexShare)
}

// refuseFlex answers a request that asked for tier (its body's
// service_tier) 429 Resource Unavailable when it asked for flex and the
// provider has no flex capacity for it (SetFlexUnavailable), and reports
// whether it did. Its usage is never charged, as OpenAI charges nothing
// for it.
func (x *exchange) refuseFlex(tier string) bool {
	if tier != tierFlex || !x.p.flexRefuses() {
		return false
	}
	code := flexUnavailableCode
	x.flexRefused = true
	x.writeJSON(http.StatusTooManyRequests, openAIError{Error: openAIErrorDetail{
		Message: flexUnavailableMessage, Type: flexUnavailableCode, Code: &code}})
	return true
}
