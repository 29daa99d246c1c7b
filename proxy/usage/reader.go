package usage

// reader reads the responses of one API family into a tally: where their
// usage, service tier, model and generated text are, in a JSON body and
// in a stream's events. Each family's reader is in the file that
// describes its responses: chatReader (Chat Completions and legacy
// completions, openai.go), embeddingsReader (embeddings.go),
// responsesReader (responses.go), anthropicReader (anthropic.go),
// realtimeReader (realtime.go) and geminiReader (gemini.go). A reader holds nothing: what a response
// reported is its tally, which the Meter holds.
type reader interface {
	// body reads a whole JSON body.
	body(t *tally, body []byte)
	// tail reads a JSON body too large to keep, from what d kept: its
	// usage from its last bytes, its service tier and model from there or
	// its first bytes, and, of an API with output, all the bytes of the
	// body as generated text for the estimate when it has none.
	tail(t *tally, d *window)
	// event reads one event of a stream, kept whole: name is its event:
	// field (empty when absent), data its data.
	event(t *tally, name, data []byte)
	// longEvent reads an event whose data outgrew its window d: its type
	// from the event: field or the first bytes of its data, a usage from
	// its last bytes, and, when it is a delta, all its bytes as generated
	// text (an upper bound of the text in them).
	longEvent(t *tally, name []byte, d *window)
}

// readerFor returns the reader of api's responses: nil for Other, and for
// a value no API constant names, whose responses are not read.
func readerFor(api API) reader {
	switch api {
	case ChatCompletions, Completions:
		return chatReader{}
	case Embeddings:
		return embeddingsReader{}
	case Responses:
		return responsesReader{}
	case Messages:
		return anthropicReader{}
	case Realtime:
		return realtimeReader{}
	case GenerateContent:
		return geminiReader{}
	case EmbedContent:
		return geminiReader{embed: true}
	}
	return nil
}
