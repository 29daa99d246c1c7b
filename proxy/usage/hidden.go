package usage

import (
	"strings"

	"github.com/tidwall/gjson"
)

// What makes a request's input hidden (Request.HiddenInput): the provider
// bills input its body does not show, or shows in a form whose size says
// nothing of the tokens billed, so that the body's bytes ÷ 4 does not
// bound it.

// hiddenStateKeys are the top-level keys that name input the provider
// keeps server-side, any value but null: a Responses request's
// previous_response_id and conversation (the earlier turns, billed again
// as input), Anthropic's container (the files of a code-execution
// container) and mcp_servers (tools listed and called remotely), and
// Chat Completions' web_search_options (search results read by the
// model), and a Gemini request's cachedContent (geminirequest.go). prompt counts too, but only as an object (promptKey).
var hiddenStateKeys = [...]string{"previous_response_id", "conversation", "container", "mcp_servers", "web_search_options",
	"cachedContent", "cached_content"}

// promptKey is a Responses request's stored prompt when its value is an
// object ({"id": "pmpt_…", "variables": …}): the prompt's text is the
// provider's. A string or an array (the legacy Completions prompt) is text
// the body shows.
const promptKey = "prompt"

// partContainers are the top-level keys whose values hiddenParts looks
// into: a Responses request's input items, a chat or Messages request's
// messages and a Gemini request's contents.
var partContainers = [...]string{"input", "messages", "contents"}

// hiddenPartTypes are the type values, of an input item, a content part
// or a block nested in one, whose tokens the body's size does not bound:
// images, files, documents and audio, inline or by reference (a small
// image URL or file id is billed as the whole image or file; a
// well-compressed image inline as its pixels, not its bytes), and a
// Responses item_reference (an earlier item, stored). Responses' are
// input_image, input_file, input_audio and item_reference; Chat
// Completions' image_url, file and input_audio; Anthropic's image,
// document, search_result and container_upload.
var hiddenPartTypes = [...]string{
	"input_image", "input_file", "input_audio", "item_reference",
	"image_url", "file",
	"image", "document", "search_result", "container_upload",
}

// serverToolPrefixes are the starts of the tool types the provider runs
// itself, feeding what they find to the model as input the body never
// shows: OpenAI's file_search, web_search (and web_search_preview…),
// code_interpreter, mcp, computer_use_preview and image_generation;
// Anthropic's versioned server tools web_search_…, web_fetch_…,
// code_execution_… and tool_search_tool_…, and its mcp_toolset.
var serverToolPrefixes = [...]string{
	"file_search", "web_search", "code_interpreter", "mcp", "computer_use", "image_generation",
	"web_fetch", "code_execution", "tool_search",
}

// toolsKey is the top-level key of a request's tools.
const toolsKey = "tools"

// maxPartDepth bounds how deep hiddenParts looks under input or messages:
// the deepest place a hidden part sits is an Anthropic image in a
// tool_result's content, messages[i].content[j].content[k], five levels
// below the array. Deeper values are not looked into, so a hostile
// nesting costs at most maxPartDepth+1 passes over its bytes.
const maxPartDepth = 6

// hidesInput reports whether the top-level key k with value v marks the
// request's input hidden. Keys compare as fieldOf's do (case folded).
func hidesInput(k string, v gjson.Result) bool {
	switch {
	case len(k) > maxKeyLen:
		return false
	case strings.EqualFold(k, promptKey):
		return v.IsObject()
	case strings.EqualFold(k, toolsKey):
		return hasServerTool(v)
	}
	for _, name := range hiddenStateKeys {
		if strings.EqualFold(k, name) {
			return v.Type != gjson.Null
		}
	}
	for _, name := range partContainers {
		if strings.EqualFold(k, name) {
			return hiddenParts(v, 0)
		}
	}
	return false
}

// hasServerTool reports whether tools, an array of tool objects, holds
// one whose type a serverToolPrefixes entry starts.
func hasServerTool(tools gjson.Result) (found bool) {
	if !tools.IsArray() {
		return false
	}
	tools.ForEach(func(_, tool gjson.Result) bool {
		found = typeIs(tool, func(t string) bool { return hasPrefixFold(t, serverToolPrefixes[:]) }) || hasGeminiServerTool(tool)
		return !found
	})
	return found
}

// hiddenParts reports whether v, at depth below a part container, holds
// (within maxPartDepth) an object whose type is one of hiddenPartTypes,
// or a Gemini part with one of geminiHiddenParts: one pass over each
// array or object, looking at its type and members and into them.
func hiddenParts(v gjson.Result, depth int) (found bool) {
	if depth > maxPartDepth || !v.IsArray() && !v.IsObject() {
		return false
	}
	object := v.IsObject()
	v.ForEach(func(k, e gjson.Result) bool {
		found = object && (isType(k, e, isHiddenPart) || oneOfFold(k.Str, geminiHiddenParts[:])) || hiddenParts(e, depth+1)
		return !found
	})
	return found
}

// typeIs reports whether v is an object with a "type" member that match
// accepts (any of them, if the key repeats: the provider reads the last,
// the proxy takes any).
func typeIs(v gjson.Result, match func(string) bool) (found bool) {
	if !v.IsObject() {
		return false
	}
	v.ForEach(func(k, e gjson.Result) bool {
		found = isType(k, e, match)
		return !found
	})
	return found
}

// isType reports whether the member k: e is a string "type" (the key case
// folded) that match accepts.
func isType(k, e gjson.Result, match func(string) bool) bool {
	return e.Type == gjson.String && strings.EqualFold(k.Str, "type") && match(e.Str)
}

// isHiddenPart reports whether t is one of hiddenPartTypes.
func isHiddenPart(t string) bool {
	for _, h := range hiddenPartTypes {
		if strings.EqualFold(t, h) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether one of prefixes starts s, case folded
// (ASCII: tool types are).
func hasPrefixFold(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return true
		}
	}
	return false
}
