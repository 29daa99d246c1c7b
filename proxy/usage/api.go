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

// AzureDeployment splits an Azure deployment-scoped path
// (/openai/deployments/{deployment}/{endpoint}) into the deployment's
// segment, as the path spells it, and the endpoint after it; ok is false
// for any other path. The proxy's route and APIForPath both read the
// deployment here, so they cannot disagree on it.
func AzureDeployment(path string) (deployment, endpoint string, ok bool) {
	rest, ok := strings.CutPrefix(path, azureDeployments)
	if !ok {
		return "", "", false
	}
	deployment, endpoint, _ = strings.Cut(rest, "/")
	return deployment, endpoint, true
}

// ValidDeployment reports whether name is a deployment name the proxy and
// Azure read alike: one or more ASCII letters, digits, '-', '_' and '.',
// not ending in '.'. Azure compares deployment names case-insensitively
// (the proxy's pools do too, quota.Model), and a server may drop a
// trailing dot or a ";params" suffix, or decode "%2E": the name the pool
// was chosen by would not be the deployment that serves. The proxy's
// route also requires the escaped path to spell the name as it is (no
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

// APIForPath returns the API served at a request's URL path:
// /v1/chat/completions and Azure's
// /openai/deployments/{deployment}/chat/completions, /v1/responses,
// /v1/messages (not /v1/messages/batches nor /v1/messages/count_tokens),
// /v1/embeddings and Azure's /openai/deployments/{deployment}/embeddings
// (for a deployment ValidDeployment accepts). Any other path, a trailing
// slash included, is Other.
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
	deployment, endpoint, ok := AzureDeployment(path)
	if !ok || !ValidDeployment(deployment) {
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
