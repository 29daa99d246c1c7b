package docgen

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/http"
	"strings"
)

// Code is one code meterproxy answers with itself: the error body's code,
// its HTTP status and what it means.
type Code struct {
	Code   string
	Status int
	// Doc is the code's constant's doc comment, without the constant's
	// name.
	Doc string
}

// refusalsIntro is docs/refusals.md's text above the tables.
//
//go:embed refusals.md.tmpl
var refusalsIntro string

// Refusals renders docs/refusals.md: the intro, the refusals and the
// negotiations, each table in the order given.
func Refusals(refusals, negotiations []Code) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, generated, "the refusal constants and their table in proxy/refusal.go and proxy/negotiation.go")
	b.WriteString(refusalsIntro)
	table := func(title string, codes []Code) {
		fmt.Fprintf(&b, "\n## %s\n\n| code | status | meaning |\n|---|---|---|\n", title)
		for _, c := range codes {
			fmt.Fprintf(&b, "| `%s` | %d %s | %s |\n", c.Code, c.Status, http.StatusText(c.Status), cell(c.Doc))
		}
	}
	table("Refusals", refusals)
	table("Negotiations", negotiations)
	return b.Bytes()
}

// Meaning is a constant's doc comment without its name: "reasonX: the
// body …" is "The body …".
func Meaning(name, doc string) string {
	rest, ok := strings.CutPrefix(doc, name)
	if !ok {
		return doc
	}
	rest = strings.TrimLeft(rest, ": ")
	if rest == "" {
		return ""
	}
	return strings.ToUpper(rest[:1]) + rest[1:]
}
