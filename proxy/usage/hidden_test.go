package usage

import (
	"strings"
	"testing"
)

// TestReadRequestHiddenInput: what marks a request's input hidden — input
// kept server-side, non-text parts, tools the provider runs — in each
// API's shape, and what does not (text, client tools, a legacy prompt
// string, the same words out of place).
func TestReadRequestHiddenInput(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       bool
	}{
		// Responses: state kept server-side.
		{"previous_response_id", `{"model":"gpt-4.1","previous_response_id":"resp_1","input":"and then?"}`, true},
		{"previous_response_id null", `{"model":"gpt-4.1","previous_response_id":null,"input":"hi"}`, false},
		{"conversation id", `{"model":"gpt-4.1","conversation":"conv_1","input":"hi"}`, true},
		{"conversation object", `{"model":"gpt-4.1","conversation":{"id":"conv_1"},"input":"hi"}`, true},
		{"stored prompt", `{"model":"gpt-4.1","prompt":{"id":"pmpt_1","version":"2","variables":{"city":"Oslo"}}}`, true},
		{"legacy prompt string", `{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","max_tokens":7}`, false},
		{"legacy prompt array", `{"model":"gpt-3.5-turbo-instruct","prompt":["a","b"]}`, false},
		{"item_reference", `{"model":"gpt-4.1","input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"go on"}]}`, true},
		// Responses: non-text parts.
		{"input_image by URL", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"what is it?"},{"type":"input_image","image_url":"https://x/cat.png"}]}]}`, true},
		{"input_file by id", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, true},
		{"input_audio", `{"model":"gpt-4o-audio","input":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`, true},
		{"image in a function_call_output", `{"model":"gpt-4.1","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","file_id":"file-1"}]}]}`, true},
		{"text input items", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call_output","call_id":"c","output":"{\"type\":\"input_image\"}"}]}`, false},
		{"input as a string", `{"model":"gpt-4.1","input":"input_image"}`, false},
		// Responses: tools the provider runs.
		{"file_search", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, true},
		{"web_search", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"web_search"}]}`, true},
		{"web_search_preview", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"web_search_preview_2025_03_11"}]}`, true},
		{"code_interpreter", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, true},
		{"mcp", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://x"}]}`, true},
		{"computer_use_preview", `{"model":"computer-use-preview","input":"hi","tools":[{"type":"computer_use_preview","display_width":1024}]}`, true},
		{"image_generation", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"function","name":"f"},{"type":"image_generation"}]}`, true},
		{"function tools only", `{"model":"gpt-4.1","input":"hi","tools":[{"type":"function","name":"web_search","parameters":{"type":"object","properties":{"type":{"type":"string"}}}}]}`, false},
		// Chat Completions.
		{"chat image_url", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]}`, true},
		{"chat file", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, true},
		{"chat input_audio", `{"model":"gpt-4o-audio-preview","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}}]}]}`, true},
		{"chat web_search_options", `{"model":"gpt-4o-search-preview","web_search_options":{},"messages":[{"role":"user","content":"news?"}]}`, true},
		{"chat text parts", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"an image_url, a file"}]}]}`, false},
		{"chat string content", `{"model":"gpt-4o","messages":[{"role":"system","content":"type: image"},{"role":"user","content":"hi"}]}`, false},
		{"chat tool calls", `{"model":"gpt-4o","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"file","arguments":"{}"}}]}]}`, false},
		// Anthropic Messages.
		{"anthropic image", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/cat.png"}}]}]}`, true},
		{"anthropic document", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, true},
		{"anthropic search_result", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"x"}]}]}]}`, true},
		{"anthropic image in a tool_result", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}]}`, true},
		{"anthropic container", `{"model":"claude-sonnet-4-5","max_tokens":100,"container":"container_1","messages":[{"role":"user","content":"hi"}]}`, true},
		{"anthropic mcp_servers", `{"model":"claude-sonnet-4-5","max_tokens":100,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}],"messages":[{"role":"user","content":"hi"}]}`, true},
		{"anthropic web_search", `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}],"messages":[{"role":"user","content":"hi"}]}`, true},
		{"anthropic web_fetch", `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"messages":[{"role":"user","content":"hi"}]}`, true},
		{"anthropic code_execution", `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`, true},
		{"anthropic client tools", `{"model":"claude-sonnet-4-5","max_tokens":100,"tools":[{"name":"get_weather","input_schema":{"type":"object"}},{"type":"bash_20250124","name":"bash"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`, false},
		// Spellings the providers' parsers may read as the same.
		{"key in another case", `{"model":"gpt-4.1","Previous_Response_ID":"resp_1"}`, true},
		{"escaped key", `{"model":"gpt-4.1","previous_response_\u0069d":"resp_1"}`, true},
		{"type in another case", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"TYPE":"Image_URL","image_url":{"url":"u"}}]}]}`, true},
		{"a repeated type, any of them", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","type":"text","text":"x"}]}]}`, true},
		{"a repeated input, any of them", `{"model":"gpt-4.1","input":[{"type":"input_image","file_id":"f"}],"input":"hi"}`, true},
		// Out of place: nested fields, or too deep to look at.
		{"previous_response_id nested", `{"model":"gpt-4.1","metadata":{"previous_response_id":"resp_1"},"input":"hi"}`, false},
		{"image part outside input and messages", `{"model":"gpt-4.1","text":{"format":{"type":"image_url"}},"input":"hi"}`, false},
		{"tools not an array", `{"model":"gpt-4.1","tools":{"type":"file_search"}}`, false},
		{"past the depth bound", `{"input":` + strings.Repeat("[", maxPartDepth+1) + `{"type":"input_image"}` + strings.Repeat("]", maxPartDepth+1) + `}`, false},
		{"at the depth bound", `{"input":` + strings.Repeat("[", maxPartDepth) + `{"type":"input_image"}` + strings.Repeat("]", maxPartDepth) + `}`, true},
		{"not an object", `[{"previous_response_id":"resp_1"}]`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadRequest("application/json", []byte(tt.body))
			if err != nil || got.HiddenInput != tt.want {
				t.Errorf("ReadRequest(%s) = %+v, %v; want HiddenInput %v", tt.body, got, err, tt.want)
			}
		})
	}
}

// TestReadRequestHiddenInputKeepsTheFields: looking for hidden input
// changes nothing else ReadRequest reads or refuses: the fields around a
// hidden part, a duplicate after it.
func TestReadRequestHiddenInputKeepsTheFields(t *testing.T) {
	got, err := ReadRequest("", []byte(`{"model":"gpt-4.1","input":[{"type":"input_image","file_id":"f"}],"max_output_tokens":300,"background":true}`))
	if err != nil || got != (Request{Model: "gpt-4.1", MaxOutput: 300, Generations: 1, Background: true, HiddenInput: true}) {
		t.Errorf("ReadRequest = %+v, %v", got, err)
	}
	if _, err := ReadRequest("", []byte(`{"model":"a","previous_response_id":"r","model":"b"}`)); err == nil {
		t.Error("a repeated model after previous_response_id was not refused")
	}
}

// TestReadRequestGemini: a Gemini request's output cap and candidates
// are read from its generationConfig, in either spelling, the largest
// winning; what hides its input (cached content, inline or file data,
// Google's own tools) is seen, and text parts and function tools are not.
func TestReadRequestGemini(t *testing.T) {
	const text = `"contents":[{"role":"user","parts":[{"text":"inlineData, fileData"}]}]`
	for _, tt := range []struct {
		name, body      string
		maxOutput, gens int64
		hidden          bool
	}{
		{"text", `{` + text + `}`, 0, 1, false},
		{"output cap", `{` + text + `,"generationConfig":{"maxOutputTokens":500,"candidateCount":2}}`, 500, 2, false},
		{"proto spelling", `{` + text + `,"generation_config":{"max_output_tokens":300,"candidate_count":3}}`, 300, 3, false},
		{"both spellings: the largest", `{"generationConfig":{"maxOutputTokens":100,"max_output_tokens":700},"generation_config":{"maxOutputTokens":400}}`, 700, 1, false},
		{"wrong type", `{"generationConfig":{"maxOutputTokens":"500"}}`, 0, 1, false},
		{"cachedContent", `{"cachedContent":"cachedContents/abc",` + text + `}`, 0, 1, true},
		{"inlineData", `{"contents":[{"role":"user","parts":[{"text":"what is it?"},{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`, 0, 1, true},
		{"file_data", `{"contents":[{"parts":[{"file_data":{"mime_type":"application/pdf","file_uri":"https://x/files/1"}}]}]}`, 0, 1, true},
		{"googleSearch", `{` + text + `,"tools":[{"googleSearch":{}}]}`, 0, 1, true},
		{"codeExecution", `{` + text + `,"tools":[{"codeExecution":{}}]}`, 0, 1, true},
		{"function tools only", `{` + text + `,"tools":[{"functionDeclarations":[{"name":"googleSearch"}]}]}`, 0, 1, false},
	} {
		got, err := ReadRequest("application/json", []byte(tt.body))
		if err != nil || got.MaxOutput != tt.maxOutput || got.Generations != tt.gens || got.HiddenInput != tt.hidden {
			t.Errorf("%s: ReadRequest = %+v, %v; want MaxOutput %d, Generations %d, HiddenInput %v", tt.name, got, err, tt.maxOutput, tt.gens, tt.hidden)
		}
	}
}
