package usage

// API is the provider API a request speaks, which decides where a response
// reports its usage. Which paths serve which API is the proxy's provider
// table (proxy/provider.go). The zero value is ChatCompletions.
type API uint8

const (
	// ChatCompletions is OpenAI Chat Completions, also served by Azure
	// OpenAI, vLLM and other OpenAI-compatible servers.
	ChatCompletions API = iota
	// Responses is the OpenAI Responses API.
	Responses
	// Messages is the Anthropic Messages API.
	Messages
	// Embeddings is the OpenAI embeddings API: input tokens only.
	Embeddings
	// Completions is OpenAI's legacy completions API (/v1/completions,
	// Azure's deployment /completions): Chat Completions' usage, its text
	// in each choice's text.
	Completions
	// Other is any other path; its responses are not metered.
	Other
	// Realtime is OpenAI's Realtime API (and Azure's), spoken over a
	// WebSocket: each response's usage in its response.done event
	// (realtime.go). Placed after Other so that the values before keep
	// their numbers.
	Realtime
	// GenerateContent is Google's Gemini API: generateContent and
	// streamGenerateContent (gemini.go), its usage in usageMetadata.
	GenerateContent
	// EmbedContent is the Gemini API's embedContent and
	// batchEmbedContents: input only.
	EmbedContent
)

// String returns the API's name as used in logs.
func (a API) String() string {
	switch a {
	case ChatCompletions:
		return "chat_completions"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	case Embeddings:
		return "embeddings"
	case Completions:
		return "completions"
	case Realtime:
		return "realtime"
	case GenerateContent:
		return "generate_content"
	case EmbedContent:
		return "embed_content"
	default:
		return "other"
	}
}

// ValidDeployment reports whether name is a deployment name the proxy and
// Azure read alike: one or more ASCII letters, digits, '-', '_' and '.',
// not ending in '.'. Azure compares deployment names case-insensitively
// (the proxy's pools do too, quota.Model), and a server may drop a
// trailing dot or a ";params" suffix, or decode "%2E": the name the pool
// was chosen by would not be the deployment that serves. The proxy also
// requires the escaped path to spell the name as it is (no
// percent-encoding).
func ValidDeployment(name string) bool {
	if name == "" || name[len(name)-1] == '.' {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
