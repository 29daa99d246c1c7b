package usage

import "strings"

// Provider answers as they arrive on the wire, written from the formats in
// docs/providers.md ("Usage fields") and the providers' published examples.

// sse joins events into a stream: each event's lines end with LF and the
// event with a blank line.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return b.String()
}

// Chat completions JSON.
const (
	chatJSON = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {"role": "assistant", "content": "Hello! The \"usage\" of tokens is 7.", "refusal": null, "annotations": []},
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19,
    "completion_tokens": 10,
    "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_e2a8a1b1c3"
}`
	embeddingsJSON  = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292,-0.0028842222]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`
	responsesJSON   = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}`
	anthropicJSON   = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1200,"cache_read_input_tokens":8000,"cache_creation":{"ephemeral_5m_input_tokens":1200,"ephemeral_1h_input_tokens":0},"output_tokens":503,"service_tier":"standard"}}`
	openAIErrorJSON = `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
)

// OpenAI chat completion chunks.
const (
	chunkRole    = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e2a8a1b1c3","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"4xV3h"}`
	chunkHello   = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e2a8a1b1c3","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k2"}`
	chunkWorld   = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e2a8a1b1c3","choices":[{"index":0,"delta":{"content":", world!\n"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Zq1"}`
	chunkStop    = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e2a8a1b1c3","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"p"}`
	chunkUsage   = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_e2a8a1b1c3","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"mB"}`
	chunkDone    = `data: [DONE]`
	chatTextSize = int64(len("Hello") + len(", world!\n"))
)

// Chat streams: with include_usage, without it, and cut short.
var (
	chatStreamUsage   = sse(chunkRole, chunkHello, chunkWorld, chunkStop, chunkUsage, chunkDone)
	chatStreamNoUsage = sse(chunkRole, chunkHello, chunkWorld, chunkStop, chunkDone)
	chatStreamNoDone  = sse(chunkRole, chunkHello, chunkWorld, chunkStop, chunkUsage)
	chatStreamCut     = sse(chunkRole, chunkHello, chunkWorld)
)

// Azure OpenAI: the first chunk has empty choices and prompt_filter_results
// but no usage; content chunks carry content_filter_results.
const (
	azureFilter = `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}]}`
	// azureFilterNullUsage is the same chunk as a server that always writes usage sends it.
	azureFilterNullUsage = `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}],"usage":null}`
	azureContent         = `data: {"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Hi there"},"finish_reason":null,"index":0,"logprobs":null}],"created":1741570283,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_b705f0c291"}`
	azureStop            = `data: {"choices":[{"content_filter_results":{},"delta":{},"finish_reason":"stop","index":0,"logprobs":null}],"created":1741570283,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_b705f0c291"}`
	azureUsage           = `data: {"choices":[],"created":1741570283,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_b705f0c291","usage":{"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":14}}`
)

var (
	azureStreamNoUsage = sse(azureFilter, azureContent, azureStop, chunkDone)
	azureStreamUsage   = sse(azureFilterNullUsage, azureContent, azureStop, azureUsage, chunkDone)
)

// vLLM with stream_options {include_usage, continuous_usage_stats}: every
// chunk carries the running usage, the last chunk the total.
const (
	vllm1 = `data: {"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1741570283,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":40,"total_tokens":40,"completion_tokens":0}}`
	vllm2 = `data: {"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1741570283,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":"One"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":40,"total_tokens":41,"completion_tokens":1}}`
	vllm3 = `data: {"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1741570283,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" two"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2}}`
	vllm4 = `data: {"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1741570283,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" three"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":40,"total_tokens":43,"completion_tokens":3}}`
	vllm5 = `data: {"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1741570283,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":40,"total_tokens":43,"completion_tokens":3}}`
)

var (
	vllmStream    = sse(vllm1, vllm2, vllm3, vllm4, vllm5, chunkDone)
	vllmStreamCut = sse(vllm1, vllm2, vllm3)
)

// OpenAI Responses API stream.
const (
	respCreated    = "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","error":null,"incomplete_details":null,"instructions":"You are a helpful assistant.","max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}`
	respInProgress = "event: response.in_progress\n" + `data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","output":[],"usage":null}}`
	respItemAdded  = "event: response.output_item.added\n" + `data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"in_progress","role":"assistant","content":[]}}`
	respPartAdded  = "event: response.content_part.added\n" + `data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`
	respDelta1     = "event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hi","logprobs":[],"obfuscation":"Qx"}`
	respDelta2     = "event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":" there!","logprobs":[],"obfuscation":"a"}`
	respTextDone   = "event: response.output_text.done\n" + `data: {"type":"response.output_text.done","sequence_number":6,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"text":"Hi there!","logprobs":[]}`
	respCompleted  = "event: response.completed\n" + `data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}`
	respIncomplete = "event: response.incomplete\n" + `data: {"type":"response.incomplete","sequence_number":7,"response":{"id":"resp_67c9","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[],"usage":{"input_tokens":37,"output_tokens":16,"total_tokens":53}}}`
	respFailed     = "event: response.failed\n" + `data: {"type":"response.failed","sequence_number":7,"response":{"id":"resp_67c9","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed to generate a response."},"output":[],"usage":null}}`
	respTextSize   = int64(len("Hi") + len(" there!"))
)

var (
	responsesStream           = sse(respCreated, respInProgress, respItemAdded, respPartAdded, respDelta1, respDelta2, respTextDone, respCompleted)
	responsesStreamIncomplete = sse(respCreated, respDelta1, respDelta2, respIncomplete)
	responsesStreamFailed     = sse(respCreated, respDelta1, respDelta2, respFailed)
	responsesStreamCut        = sse(respCreated, respInProgress, respDelta1, respDelta2)
)

// Anthropic Messages stream, with prompt caching, a ping, and two
// cumulative message_delta events (as with server tools).
const (
	antStart      = "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":1200,"cache_read_input_tokens":8000,"output_tokens":1,"service_tier":"standard"}}}`
	antBlockStart = "event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	antPing       = "event: ping\n" + `data: {"type": "ping"}`
	antDelta1     = "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`
	antDelta2     = "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"! How can I help?"}}`
	antBlockStop  = "event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}`
	antMsgDelta1  = "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":10}}`
	antMsgDelta2  = "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":25,"cache_creation_input_tokens":1200,"cache_read_input_tokens":8000,"output_tokens":15,"server_tool_use":null}}`
	antStop       = "event: message_stop\n" + `data: {"type":"message_stop"}`
	antError      = "event: error\n" + `data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`
	antUnknown    = "event: future_event\n" + `data: {"type":"future_event","usage":{"output_tokens":9999,"input_tokens":9999}}`
	antTextSize   = int64(len("Hello") + len("! How can I help?"))
	antInput      = 25 + 1200 + 8000
)

var (
	anthropicStream      = sse(antStart, antBlockStart, antPing, antDelta1, antDelta2, antBlockStop, antMsgDelta1, antMsgDelta2, antStop)
	anthropicStreamError = sse(antStart, antBlockStart, antPing, antDelta1, antDelta2, antError)
	anthropicStreamCut   = sse(antStart, antBlockStart, antDelta1, antDelta2, antBlockStop, antMsgDelta1)
)
