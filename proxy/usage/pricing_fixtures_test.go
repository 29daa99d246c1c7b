package usage

// Answers that read from and write to the prompt cache and name the
// service tier that served them: what pricing reads (docs/providers.md ("Usage fields")).

// Chat completions: a flex answer that read 1920 of its 2006 prompt tokens
// from the cache, and one that wrote 512 (cache_write_tokens, newer API).
const (
	chatCachedJSON = `{"id":"chatcmpl-C1","object":"chat.completion","created":1741569952,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"From the cache.","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},` +
		`"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},` +
		`"service_tier":"flex","system_fingerprint":"fp_f9f4fb6dbf"}`
	chatCacheWriteJSON = `{"id":"chatcmpl-C2","object":"chat.completion","model":"gpt-5","choices":[],` +
		`"usage":{"prompt_tokens":4096,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":1024,"cache_write_tokens":512}},"service_tier":"priority"}`
)

// A chat stream at the priority tier: every chunk names it, the usage
// chunk reports the cached tokens.
const (
	chunkPrioHello = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","service_tier":"priority","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkPrioStop  = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","service_tier":"priority","system_fingerprint":"fp","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`
	chunkPrioUsage = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","service_tier":"priority","system_fingerprint":"fp","choices":[],"usage":{"prompt_tokens":1500,"completion_tokens":40,"total_tokens":1540,"prompt_tokens_details":{"cached_tokens":1280,"cache_write_tokens":0}}}`
	// The same chunks without the tier: a server that names it on its
	// first chunks only.
	chunkNoTierStop  = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	chunkNullTier    = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","model":"gpt-4o","service_tier":null,"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}`
	chunkNoTierUsage = `data: {"id":"chatcmpl-C3","object":"chat.completion.chunk","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1500,"completion_tokens":40,"prompt_tokens_details":{"cached_tokens":1280}}}`
)

// vLLM-style continuous usage with prompt caching: every chunk carries
// the running usage, its cached tokens included; a late chunk reports
// less, and the last none.
const (
	vllmCache1 = `data: {"id":"v","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}`
	vllmCache2 = `data: {"id":"v","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":16,"cache_write_tokens":8}}}`
	vllmCache3 = `data: {"id":"v","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3}}`
)

// Responses API: a JSON answer and a stream. The request asked for "auto";
// response.created says so, the terminal event names the tier that served.
const (
	responsesCachedJSON = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","model":"gpt-4.1",` +
		`"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Cached.","annotations":[]}]}],` +
		`"parallel_tool_calls":true,"service_tier":"flex","store":true,` +
		`"usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2048,"cache_write_tokens":512},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":3087},"user":null,"metadata":{}}`
	respCreatedAuto = "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_2","object":"response","status":"in_progress","model":"gpt-4.1","output":[],"service_tier":"auto","usage":null}}`
	respCreatedFlex = "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_2","object":"response","status":"in_progress","model":"gpt-4.1","output":[],"service_tier":"flex","usage":null}}`
	respCachedDone  = "event: response.completed\n" + `data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_2","object":"response","status":"completed","model":"gpt-4.1",` +
		`"output":[{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],` +
		`"service_tier":"default","usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":24},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}`
	// respNoTierDone is a terminal event whose response names no tier.
	respNoTierDone = "event: response.completed\n" + `data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_2","status":"completed","output":[],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":24},"output_tokens":11}}}`
)

// Anthropic Messages at the priority tier: message_start names it and
// the cache parts, the last message_delta names them again.
const (
	anthropicPriorityJSON = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":4000,"output_tokens":12,"service_tier":"priority"}}`
	antPrioStart = "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"priority"}}}`
	antPrioDelta = "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":300,"output_tokens":25,"service_tier":"priority"}}`
	// antBatchDelta names another tier than message_start did: the last wins.
	antBatchDelta = "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":25,"service_tier":"batch"}}`
)
