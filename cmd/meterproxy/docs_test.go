package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"

	"github.com/meterproxy/meterproxy/internal/docgen"
)

// update makes the docs tests write the references instead of checking
// them: make docs.
var update = flag.Bool("update", false, "write docs/configuration.md instead of checking it")

// TestDocsConfiguration keeps docs/configuration.md what the code says:
// every key of Config, with its default from defaultConfig and its
// meaning from its field's doc comment, which every key must have.
func TestDocsConfiguration(t *testing.T) {
	src, err := docgen.NewSource(".")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := docgen.Keys(src, defaultConfig())
	if err != nil {
		t.Fatalf("every key needs a doc comment on its field, the reference's one source:\n%v", err)
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check-config", "--config", filepath.Join("..", "..", "config.example.yaml")}, nil, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	doc, err := docgen.Configuration(keys, out.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := docgen.Check(src, "docs/configuration.md", doc, *update); err != nil {
		t.Error(err)
	}
	t.Logf("%d keys", len(keys))
}
