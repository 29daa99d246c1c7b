// Package usage meters the tokens of LLM provider responses as they stream
// past the proxy, without delaying or changing what the client receives.
//
// A [Meter] is fed a copy of every response byte (it is an [io.Writer]) and,
// once the body has ended, reports the [Usage]: the provider's own numbers
// when the response carried them, otherwise an estimate flagged as such —
// with what pricing needs besides, the part of the input read from or
// written to the provider's prompt cache and the service tier the
// response says served it.
// It understands OpenAI Chat Completions (and Azure OpenAI, vLLM and other
// compatible servers), legacy completions, the OpenAI Responses API,
// Anthropic Messages and embeddings, as JSON bodies and as server-sent event streams.
//
// On the request side, [EstimateInput] and [ReadRequest] size a request
// before it is sent (ReadRequest also says whether its body hides input
// the provider bills, Request.HiddenInput), and [InjectStreamUsage] asks an OpenAI-compatible server to
// report usage at the end of a stream; [StripUsageChunk] then removes that
// extra chunk from what a client that did not ask for it receives.
//
// Memory per response is bounded (about 65 KiB): a JSON body or one
// event's data over 64 KiB is kept as its last 64 KiB, where providers put
// the usage, which is read from there.
package usage
