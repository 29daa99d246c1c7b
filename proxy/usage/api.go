package usage

import "strings"

// API is the provider API a request speaks, which decides where a response
// reports its usage. The zero value is ChatCompletions.
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
	// Other is any other path; its responses are not metered.
	Other
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
	default:
		return "other"
	}
}

// azureDeployments is the path prefix of Azure OpenAI's deployment-scoped
// API: /openai/deployments/{deployment}/chat/completions.
const azureDeployments = "/openai/deployments/"

// APIForPath returns the API served at a request's URL path:
// /v1/chat/completions and Azure's
// /openai/deployments/{deployment}/chat/completions, /v1/responses,
// /v1/messages (not /v1/messages/batches nor /v1/messages/count_tokens),
// /v1/embeddings and Azure's /openai/deployments/{deployment}/embeddings.
// Any other path, a trailing slash included, is Other.
func APIForPath(path string) API {
	switch path {
	case "/v1/chat/completions":
		return ChatCompletions
	case "/v1/responses":
		return Responses
	case "/v1/messages":
		return Messages
	case "/v1/embeddings":
		return Embeddings
	}
	rest, ok := strings.CutPrefix(path, azureDeployments)
	if !ok {
		return Other
	}
	deployment, endpoint, ok := strings.Cut(rest, "/")
	if !ok || deployment == "" {
		return Other
	}
	switch endpoint {
	case "chat/completions":
		return ChatCompletions
	case "embeddings":
		return Embeddings
	}
	return Other
}
