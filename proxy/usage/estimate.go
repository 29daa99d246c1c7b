package usage

// bytesPerToken is the estimate's exchange rate: about four bytes of
// English text or JSON per token for current tokenizers. It errs high for
// code and non-Latin scripts, which is the safe side for a quota.
const bytesPerToken = 4

// ceilQuarter returns n / bytesPerToken rounded up.
func ceilQuarter(n int64) int64 { return (n + bytesPerToken - 1) / bytesPerToken }

// EstimateInput estimates a request's input tokens before it goes: body
// bytes / 4, rounded up, and nothing else (no max_tokens, no image or tool
// cost).
func EstimateInput(body []byte) int64 { return ceilQuarter(int64(len(body))) }
