// Package docgen writes the references in docs/ that the code is the one
// source of: docs/configuration.md, every configuration key with its type,
// its default and its field's doc comment, and docs/refusals.md, every
// code meterproxy answers with. The tests of the packages that hold the
// values (cmd/meterproxy, proxy) render them and fail when the files
// differ; `make docs` writes them.
package docgen
