package quota

import "fmt"

// What one request may be charged. A request's token charge is what its
// body asks for (max_tokens, the prompt's size), so a caller can ask for
// any number: charged as sent, one request went as the first of its
// second, and its overshoot, carried from second to second, froze the
// pool's tokens for everyone. So each pool bounds what one request may be
// charged (max_request_tokens; by default a minute of the pool's tokens,
// the most a provider accepts in one request), and Admit refuses a
// request above it before it queues, charging nothing. The carried
// overshoot is bounded too (window.next).

// ChargeTooLargeError refuses a request whose token charge exceeds what
// one request may be charged in its pool (Config.MaxCharge). Nothing was
// charged, and the same request can never be admitted: the caller should
// answer 400.
type ChargeTooLargeError struct {
	// Tokens is the request's charge; Limit the most one request may be
	// charged in its pool.
	Tokens, Limit int64
	// Key is the configuration key Limit comes from: the pool's
	// max_request_tokens, or its tokens_per_minute while that is 0
	// (e.g. account.models[0].tokens_per_minute).
	Key string
	// Pool is the pool's name as metrics label it (DefaultPool for the
	// account's).
	Pool string
}

// Error implements error.
func (e *ChargeTooLargeError) Error() string {
	return fmt.Sprintf("quota: a charge of %d tokens exceeds the %d one request may be charged in pool %s (%s)", e.Tokens, e.Limit, e.Pool, e.Key)
}

// maxCharge is MaxCharge, and the pool's name as metrics label it.
func maxCharge(c Config, pool string) (limit int64, key, label string) {
	prefix, label := c.acctKey(), DefaultPool
	tpm, most := c.Account.TokensPerMinute, c.Account.MaxRequestTokens
	for i, m := range c.Account.Models {
		if m.Name == pool {
			prefix, label = fmt.Sprintf("%s.models[%d]", c.acctKey(), i), m.Name
			tpm, most = m.TokensPerMinute, m.MaxRequestTokens
			break
		}
	}
	switch {
	case tpm <= 0:
		return 0, "", label
	case most > 0:
		return most, prefix + ".max_request_tokens", label
	}
	return tpm, prefix + ".tokens_per_minute", label
}

// charge is what req costs in its pool's tokens, decided here alone: its
// estimate when the pool enforces tokens (its tokens_per_minute, the
// account's for the account's pool), 0 when it does not — such a pool
// charges requests alone, whatever the caller estimated. It is a
// *ChargeTooLargeError when the estimate is above MaxCharge.
func charge(c Config, req Request) (int64, error) {
	limit, key, label := maxCharge(c, req.pool)
	switch {
	case limit <= 0:
		return 0, nil
	case req.Tokens > limit:
		return 0, &ChargeTooLargeError{Tokens: req.Tokens, Limit: limit, Key: key, Pool: label}
	}
	return max(0, req.Tokens), nil
}
