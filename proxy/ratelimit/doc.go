// Package ratelimit reads what an upstream LLM provider says about its own
// rate limits: the x-ratelimit-* headers of OpenAI, Azure OpenAI and
// OpenAI-compatible servers such as Groq, Azure's older x-rate-limit-*
// spelling, Anthropic's anthropic-ratelimit-* headers, and the
// retry-after-ms / Retry-After hints, and the error body of Google's
// Gemini API, which sends no such headers ([ParseGoogleError]). [Parse] turns one response's headers
// into an [Observation] ([ParseMinute]: only the buckets that count a minute,
// for a reader turning a limit into a rate); [Observation.BelowReserve] says whether the upstream
// account is running below a reserve and for how long.
//
// Each dialect is one small function over precomputed canonical header
// names. Everything here is pure: no I/O, no clock, no globals and no
// logging. The receipt time of the response is a parameter, used only to
// turn absolute reset times into durations. All functions are safe for
// concurrent use.
//
// Upstreams change formats without notice, so parsing is lenient and
// conservative. A value that is missing, negative (Azure's -1 sentinel) or
// unreadable is unknown (-1), and unknown never reads as exhausted: a
// dimension counts toward a reserve only when both its limit and its
// remaining count were reported. Every duration is bounded by [MaxDuration],
// so a garbage value cannot hold traffic for longer than a day.
package ratelimit
