package usage

import "github.com/tidwall/gjson"

// Providers price prompt tokens read from their prompt cache, and those
// written to it, apart from the rest of the input. OpenAI reports them
// inside the input count, in a details object (prompt_tokens_details for
// Chat Completions, input_tokens_details for the Responses API):
//
//	{cached_tokens, cache_write_tokens, …}
//
// (cache_write_tokens in newer versions of the API). Anthropic reports them
// beside its input_tokens (anthropicInput).

// cacheParts are the parts of an input count read from (read) and written
// to (write) the provider's prompt cache, as reported; within bounds them
// by the input they are parts of.
type cacheParts struct {
	read, write int64
}

// openAICache returns the cache parts of an OpenAI details object; a count
// missing or not a number is 0.
func openAICache(details gjson.Result) cacheParts {
	var c cacheParts
	if !details.IsObject() {
		return c
	}
	if v := details.Get("cached_tokens"); v.Type == gjson.Number {
		c.read = count(v)
	}
	if v := details.Get("cache_write_tokens"); v.Type == gjson.Number {
		c.write = count(v)
	}
	return c
}

// highWater returns the larger of c and d, part by part.
func (c cacheParts) highWater(d cacheParts) cacheParts {
	return cacheParts{read: max(c.read, d.read), write: max(c.write, d.write)}
}

// within returns c bounded so that read + write ≤ input, whatever a
// hostile or buggy upstream reported: read first, then write from what is
// left (input ≥ 0).
func (c cacheParts) within(input int64) cacheParts {
	read := min(c.read, input)
	return cacheParts{read: read, write: min(c.write, input-read)}
}
