package usage

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A Gemini request (generateContent) names its model in its path, and
// its output cap and candidates in its generationConfig:
// maxOutputTokens and candidateCount, which Google's JSON also reads
// spelt as their proto names (generation_config, max_output_tokens,
// candidate_count). ReadRequest takes the largest value of either
// spelling, repeated or not: never below what the provider reads. A
// value of another type is no cap (Google refuses the request).
//
// Its input is hidden (HiddenInput) by a cachedContent (input the
// provider keeps, billed as cached input), a part in its contents with
// inlineData or fileData (an image, audio, video or document: inline its
// size says nothing of its tokens, by URI nothing at all), and a tool the
// provider runs (googleSearch, googleSearchRetrieval, codeExecution,
// urlContext).

// geminiConfigKeys are the spellings of generationConfig.
var geminiConfigKeys = [...]string{"generationConfig", "generation_config"}

// geminiHiddenParts are the part members whose tokens the body does not
// bound, geminiServerTools the tool members the provider runs, each in
// both spellings.
var (
	geminiHiddenParts = [...]string{"inlineData", "inline_data", "fileData", "file_data"}
	geminiServerTools = [...]string{
		"googleSearch", "google_search", "googleSearchRetrieval", "google_search_retrieval",
		"codeExecution", "code_execution", "urlContext", "url_context",
	}
)

// isGeminiConfig reports whether k names generationConfig.
func isGeminiConfig(k string) bool { return oneOfFold(k, geminiConfigKeys[:]) }

// readGeminiConfig records a generationConfig's output cap and
// candidates in r, the largest of each spelling.
func (r *Request) readGeminiConfig(v gjson.Result) {
	v.ForEach(func(k, e gjson.Result) bool {
		if e.Type != gjson.Number {
			return true
		}
		switch {
		case oneOfFold(k.Str, []string{"maxOutputTokens", "max_output_tokens"}):
			r.MaxOutput = max(r.MaxOutput, tokens(e))
		case oneOfFold(k.Str, []string{"candidateCount", "candidate_count"}):
			r.Generations = max(r.Generations, tokens(e))
		}
		return true
	})
}

// hasGeminiServerTool reports whether tool, a Gemini tool object, names a
// tool the provider runs.
func hasGeminiServerTool(tool gjson.Result) (found bool) {
	if !tool.IsObject() {
		return false
	}
	tool.ForEach(func(k, _ gjson.Result) bool {
		found = oneOfFold(k.Str, geminiServerTools[:])
		return !found
	})
	return found
}

// oneOfFold reports whether s is one of names, case folded.
func oneOfFold(s string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(s, n) {
			return true
		}
	}
	return false
}
