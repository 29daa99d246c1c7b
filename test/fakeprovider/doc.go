// Package fakeprovider is an in-process double of an LLM provider: an
// OpenAI-compatible, Anthropic-compatible and Gemini-compatible upstream
// served by an [http.Handler], for tests, demos and benchmarks of
// meterproxy.
//
// It answers
//
//	POST /v1/chat/completions   OpenAI chat completions (JSON or SSE)
//	POST /v1/completions        OpenAI legacy completions (JSON or SSE)
//	POST /v1/embeddings         OpenAI embeddings
//	POST /v1/responses          OpenAI Responses API (JSON or SSE)
//	POST /v1/responses/input_tokens  the input tokens a Responses request would count
//	POST /v1/images/generations an image, as DALL·E answers (b64_json, no usage)
//	POST /v1/audio/speech       audio/mpeg bytes (no usage)
//	GET  /v1/models             the model list
//	POST /v1/messages           Anthropic Messages (JSON or SSE)
//	POST /v1/messages/count_tokens  Anthropic's token count
//	POST /v1/files              an OpenAI file upload (multipart: file, purpose), kept by its id
//	GET  /v1/files/{id}/content the file's bytes (an input file, or a batch's output file)
//	POST /v1/batches            an OpenAI batch object, on an input file uploaded before (400 otherwise)
//	GET  /v1/batches/{id}       the batch; POST …/cancel cancels it (cancelling, then cancelled)
//	POST /v1/messages/batches   an Anthropic message batch object, its requests in the body
//	GET  /v1/messages/batches/{id}          the batch; POST …/cancel cancels it
//	GET  /v1/messages/batches/{id}/results  its results, JSONL, once it ended
//	GET  /v1/responses (Upgrade: websocket)  the Responses API over WebSocket
//	GET  /v1/realtime?model=… (Upgrade: websocket)  a Realtime session
//	POST /v1beta/models/{model}:generateContent        Gemini (JSON); also under /v1/models/…
//	POST /v1beta/models/{model}:streamGenerateContent  Gemini streamed: SSE with ?alt=sse, else a JSON array
//	POST /v1beta/models/{model}:countTokens            Gemini's token count
//	POST /v1beta/models/{model}:embedContent, :batchEmbedContents  Gemini embeddings (no usage)
//	POST /v1beta/openai/…       Gemini's OpenAI-compatible endpoint: the OpenAI paths above
//
// Gemini's answers and its RESOURCE_EXHAUSTED rate limit are described in
// gemini.go and geminierrors.go: no rate-limit headers, the retry delay
// and the quota in the 429's body, a model without quota
// (ModelLimits.NoQuota) refused with a quota of 0.
//
// A batch runs when it is first retrieved, and ends at once: an OpenAI
// batch completed, with each request answered as a chat completion in its
// output file and the sum of their usage in the batch object's usage
// (input_tokens, output_tokens, total_tokens), unless its creation carried
// X-Fake-Batch-Outcome: failed (validation failed, no request ran) or
// expired (none ran in its window), which report no usage; an Anthropic
// batch ended, every request succeeded, its results each message with its
// usage. Each creation is a new batch with an id of its own.
//
// and, as Azure OpenAI (its headers: resets in bare seconds), each OpenAI
// path above under /openai/v1/… (Azure's v1 API) and
// /openai/deployments/{name}/… (its deployment API), and /openai/responses;
// anything else with a 404 in the provider's error shape. Request bodies
// are read whole before anything is answered. Replies are deterministic: the
// text and ids derive from the request body and timestamps from
// [Config.Now], so the same request at the same instant yields the same
// bytes. Every non-streamed reply of a generating API that reports usage
// carries it with the provider's exact field names (images and speech
// report none, as DALL·E and TTS do); streams carry it where the provider
// puts it.
//
// Like a provider, it rate-limits with a token bucket of [Config.RPM]
// requests refilled continuously, debits refused requests too, and reports
// its state in x-ratelimit-* (OpenAI and Azure paths) or
// anthropic-ratelimit-* (/v1/messages…) headers on every response. With
// [Config.EnforceTPM] its token bucket is a limit too, charged as each
// provider charges (charge.go); [Config.OutputTPM] gives Anthropic's output
// a bucket of its own, and [Config.Window] refills the buckets in fixed
// windows, as Azure OpenAI evaluates them; [Config.Models] gives models (or
// Azure deployments) limits of their own, as providers keep them.
// [Config.Slots] makes it a server with a knee, as a self-hosted model
// server is: latency stretched by the requests in service over the slots.
// [Config.EndLag] ends a stream that long after its last event, as an
// upstream's end may lag its terminal event.
// [Config.Dialect] makes the OpenAI paths speak an OpenAI-compatible
// host's words (dialects.go): Together's, Fireworks', Mistral's and
// Groq's rate-limit headers from buckets of their own spans, DeepSeek's
// keep-alives while a request queues; [Config.OverCapacity] (or
// [Provider.SetOverCapacity]) answers a share of the admitted requests 503,
// the model over capacity, as Together tells it from a caller's 429.
// Anthropic's token remainders are rounded to the nearest thousand, as
// Anthropic's are. Batch endpoints have their own quota at real providers,
// so they are neither debited nor limited here.
//
// # Fault knobs
//
// Request headers let a test ask for a fault on one request:
//
//	X-Fake-Latency: 250ms     wait this long before answering (a Go duration; overrides Config.Latency)
//	X-Fake-Status: 500        answer this status with an error body in the provider's shape
//	X-Fake-Retry-After: 2     with X-Fake-Status: 429, send retry-after (seconds) and retry-after-ms
//	X-Fake-Stall-After: 3     stream 3 content chunks, then hang until the client goes away
//	X-Fake-Cut-After: 3       stream 3 content chunks, then abort the connection
//	X-Fake-Cut-At: mid_deltas cut the transport at a point of the stream (CutAt): after_created,
//	                          mid_deltas, before_terminal or after_terminal; an SSE response
//	                          aborted, a socket closed without a close frame
//	X-Fake-Terminal-Delay: 1s hold a stream's last event (response.completed, response.done,
//	                          message_stop, [DONE]) back this long
//	X-Fake-Fail-After: 2      end a streamed Responses reply after 2 content chunks with
//	                          response.failed, its usage the output sent
//
// and three shape a chat completion's reply:
//
//	X-Fake-Reply-Bytes: 4000000  pad the reply's text to about this many bytes (at most 16 MiB)
//	X-Fake-Tool-Call: true       answer with a tool call whose arguments carry the text
//	X-Fake-Hold-Tail: true       write a JSON answer but its last 256 bytes (its usage), then wait for the client to leave
//
// and two the usage of a chat, Responses or Messages reply, JSON or
// streamed:
//
//	X-Fake-Input-Tokens: 50000   report this many input tokens, not a quarter of the body (input the body does not show)
//	X-Fake-Cached-Tokens: 1000   report this many input tokens (at most all of them) as read from the prompt cache
//
// — in prompt_tokens_details.cached_tokens (chat) or
// input_tokens_details.cached_tokens (Responses), within the input count;
// for Anthropic as cache_read_input_tokens, input_tokens reduced by as many.
//
// A chat or Responses reply of an OpenAI reasoning model (a model named
// "o" and a digit — o1, o3-mini, o4-mini… — or "gpt-5…") reports half its
// output tokens, rounded down, as reasoning, in
// completion_tokens_details.reasoning_tokens (chat) or
// output_tokens_details.reasoning_tokens (Responses), within the output
// count; any other model reports 0 there. Every reply names the model
// asked for (or a default) as the model that served it.
//
// # Service tiers
//
// A chat completion (every chunk of a stream) and a Responses answer (the
// response every stream event repeats) name the service tier that served
// them in service_tier: the request body's service_tier when it is "flex"
// or "priority", else "default" (for "auto", "scale", none, or a value
// that is not a string). A Messages answer names usage.service_tier
// "standard" (in message_start when streamed): Anthropic has no flex tier.
// The tier changes neither the latency nor the limits.
//
// [Config.FlexUnavailable] (or [Provider.SetFlexUnavailable] while
// serving) answers a share of the flex requests (chat completions and
// Responses, OpenAI's and Azure's paths) 429 in OpenAI's error shape with
// code and type "resource_unavailable", as OpenAI answers when flex
// processing lacks capacity; [Stats].FlexUnavailable counts them (not
// RateLimited). They draw on the rate limit like any other request.
//
// # WebSockets
//
// A WebSocket upgrade on /v1/responses (Azure: /openai/v1/responses,
// /openai/responses) is the Responses API's WebSocket mode. Each client
// message {"type":"response.create", …the fields of POST /v1/responses}
// is one request, answered exactly as POST /v1/responses with those
// fields less type and stream_id, plus "stream": true, keys sorted (that
// is its body: a quarter of its bytes its input tokens, its hash its ids)
// would be: the same rate limit and headers, knobs, events — each a text
// message, with stream_id echoed when the event named one — usage, and
// log entry (Request.Socket "responses"). stream is implicit; background
// is refused; "generate": false (a warmup, over HTTP as well) completes
// without output, its usage the input alone. Turns on one stream_id (or on none) run in order; lanes run
// side by side, at most 16 responses in flight and 32 named lanes a
// connection. A refused turn, one the rate limit refuses included, is an
// error event — {"type":"error","status":429,"error":{type, code,
// message, param},"headers":{x-ratelimit-…, retry-after}} as OpenAI sends
// it — and the socket goes on; so is a message that is not a
// response.create (status 400, code invalid_json, invalid_event,
// unsupported_parameter, invalid_value or websocket_stream_limit_reached).
// The fault knobs apply to every turn when sent on the upgrade, and to
// one turn as its metadata entries named like them ("metadata":
// {"x-fake-cut-at": "mid_deltas"}).
//
// A WebSocket upgrade on /v1/realtime?model=… (Azure:
// /openai/realtime?deployment=…; the "realtime" subprotocol is
// negotiated) is a Realtime session in the GA API's shapes. It starts with
// session.created (audio out, server VAD) and takes session.update (→
// session.updated; output_modalities, instructions, max_output_tokens,
// audio.input.turn_detection, or the beta's modalities, turn_detection,
// max_response_output_tokens), conversation.item.create (→
// conversation.item.created), input_audio_buffer.append, .commit
// (→ input_audio_buffer.committed and the item's
// conversation.item.created; with server VAD the
// server then creates a response itself, Request.ServerCreated) and
// .clear, response.create and response.cancel (→ response.done
// cancelled, its usage the output sent). Each response is a request on
// the session's path (rate-limited for the session's model, charged its
// input, logged with Request.Socket "realtime"): response.created, the
// item (conversation.item.added and, at its end, .done), its
// response.output_text.delta (or
// response.output_audio_transcript.delta when spoken) events, and
// response.done with usage {total_tokens, input_tokens, output_tokens,
// input_token_details {cached_tokens, text_tokens, audio_tokens,
// cached_tokens_details}, output_token_details {text_tokens,
// audio_tokens}}, then rate_limits.updated with the request and token
// buckets' limit, remaining and reset_seconds (those the provider has). A
// response the rate limit refuses is an error event (rate_limit_error,
// rate_limit_exceeded) followed by rate_limits.updated; the session goes
// on. Usage is deterministic: a client item's text tokens are a quarter
// of its JSON's bytes, committed audio one token per 100 ms of 24 kHz
// PCM16 (4,800 bytes), a response's input the whole conversation (the
// assistant's earlier output included), its cached input the previous
// response's input, its output the reply's words as text tokens and, when
// spoken, four audio tokens a word. A response's knobs are the upgrade's
// headers and its response.metadata's x-fake-* entries.
//
// Both close a socket with 1009 when a client message exceeds
// [Config.WSMaxMessageBytes], and at [Config.WSMaxAge] send an error event
// (websocket_connection_limit_reached; session_expired in Realtime) and
// close with 1000. Pings are answered. [Provider.CloseSockets] closes
// every socket with 1001; [Stats] counts sockets, turns, server-created
// responses and socket errors; [Provider.WaitIdle] waits until every
// request and turn is logged.
//
// A chat request asking for more output tokens than [Config.MaxOutputTokens]
// (or for a number of them that is not a whole number, 1e300) is answered
// 400, as OpenAI answers it; of duplicate keys the last counts, as at the
// providers. Stall, cut and the terminal delay apply to streamed
// requests only. A knob that does not parse
// is answered with 400. Configured and per-request latency is skipped for
// requests refused by the rate limit, as a provider's edge refuses at once.
package fakeprovider
