package usage

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Providers put the usage at the end of what they send: the last member of
// a chat completion, an embeddings list, a Messages answer; near the end
// of a Responses answer (before user and metadata) and of the response a
// terminal Responses event repeats. So the usage of an answer or event
// too large to keep whole is read from its last bytes (a window's tail),
// walking back from the end: lastMember.

// lastMember returns the value of the last member named key of an object
// at depth (1: the members of the top-level object, 2: of an object that is
// a member's value there, …) in the JSON text that tail ends — tail may
// start anywhere inside that text, but must end where it ends. It walks
// back from the end, skipping strings whole (every quote inside a JSON
// string is escaped), so a key inside a string, a nested object or an
// escaped key never passes for the member. ok is false when no such member
// lies whole in tail, or when what tail ends with is not an object.
func lastMember(tail []byte, key string, depth int) (value []byte, ok bool) {
	tail = bytes.TrimRight(tail, " \t\r\n")
	if len(tail) == 0 || tail[len(tail)-1] != '}' {
		return nil, false
	}
	level, end := 0, -1 // end: where the member being walked ends, at depth
	for i := len(tail) - 1; i >= 0; i-- {
		switch tail[i] {
		case '}', ']':
			level++
			if level == depth {
				end = i
			}
		case '{', '[':
			if level--; level < 0 {
				return nil, false
			}
		case ',':
			if level == depth {
				end = i
			}
		case '"':
			open := openingQuote(tail, i)
			if open < 0 {
				return nil, false
			}
			if level == depth && end > i && string(tail[open+1:i]) == key {
				if colon := keyColon(tail, i); colon > 0 {
					return bytes.TrimSpace(tail[colon+1 : end]), true
				}
			}
			i = open
		}
	}
	return nil, false
}

// openingQuote returns the index of the quote that opens the JSON string
// tail[closing] ends: the nearest quote before it that no backslash escapes
// (one preceded by an even run of backslashes). It returns -1 when there is
// none, or when a run of backslashes reaches the start of tail, where what
// came before is unknown.
func openingQuote(tail []byte, closing int) int {
	for j := bytes.LastIndexByte(tail[:closing], '"'); j >= 0; j = bytes.LastIndexByte(tail[:j], '"') {
		k := j
		for k > 0 && tail[k-1] == '\\' {
			k--
		}
		if k == 0 {
			return -1
		}
		if (j-k)%2 == 0 {
			return j
		}
	}
	return -1
}

// keyColon returns the index of the colon after the string that ends at
// tail[closing] when that string is a member's key, or -1.
func keyColon(tail []byte, closing int) int {
	for i := closing + 1; i < len(tail); i++ {
		switch tail[i] {
		case ' ', '\t', '\r', '\n':
		case ':':
			return i
		default:
			return -1
		}
	}
	return -1
}

// tailUsage returns the usage object that the JSON text tail ends holds at
// depth (see lastMember), or a Result that is not an object.
func tailUsage(tail []byte, depth int) gjson.Result {
	value, ok := lastMember(tail, "usage", depth)
	if !ok {
		return gjson.Result{}
	}
	return gjson.Parse(view(value))
}
