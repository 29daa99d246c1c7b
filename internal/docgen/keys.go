package docgen

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// Key is one configuration key: a koanf tag's path from the top of the
// file, with what the reference says of it.
type Key struct {
	// Path is the key as the file spells it, a list's items as [] —
	// "server.listen", "callers[].budget.usd".
	Path string
	// Type is what the key takes: string, integer, number, bool,
	// duration, list of strings, list (of sections), or section.
	Type string
	// Default is the key's value in the defaults, as YAML would say it;
	// for a key inside a list's item, the value it has when unset. Empty
	// for a section.
	Default string
	// Doc is the field's doc comment, its Go field names replaced by
	// their keys.
	Doc string
}

// Keys returns every key of defaults, a struct whose koanf tags are the
// configuration's keys, in declaration order, a section before its keys.
// It fails, naming each, when a key's field has no doc comment.
func Keys(src *Source, defaults any) ([]Key, error) {
	w := walker{src: src}
	v := reflect.ValueOf(defaults)
	w.walk(v.Type(), v, "")
	return w.keys, errors.Join(w.errs...)
}

type walker struct {
	src  *Source
	keys []Key
	errs []error
}

var durationType = reflect.TypeFor[time.Duration]()

// walk adds the keys of struct type t, at value v, under prefix.
func (w *walker) walk(t reflect.Type, v reflect.Value, prefix string) {
	w.walkLevel(t, v, prefix, levelTags(t, map[string]string{}))
}

// levelTags adds to tags (Go field name to key) the keys of t's fields,
// those of the structs squashed into it with them: the keys of one level
// of the file, which a doc comment may name each other by.
func levelTags(t reflect.Type, tags map[string]string) map[string]string {
	for f := range t.Fields() {
		switch tag := f.Tag.Get("koanf"); {
		case f.Anonymous && configcheck.Squashed(tag):
			levelTags(f.Type, tags)
		case tag != "" && tag != "-" && !configcheck.Squashed(tag):
			tags[f.Name] = tag
		}
	}
	return tags
}

// walkLevel adds the keys of struct type t, at value v, under prefix,
// whose level's keys are tags (levelTags): t is the section at prefix or
// a struct squashed into it.
func (w *walker) walkLevel(t reflect.Type, v reflect.Value, prefix string, tags map[string]string) {
	docs, err := w.src.FieldDocs(t.PkgPath(), t.Name())
	if err != nil {
		w.errs = append(w.errs, err)
		return
	}
	for f := range t.Fields() {
		if f.Anonymous && configcheck.Squashed(f.Tag.Get("koanf")) { // its keys are t's, documented where it is declared
			w.walkLevel(f.Type, v.FieldByIndex(f.Index), prefix, tags)
			continue
		}
		tag, ok := tags[f.Name]
		if !ok {
			continue
		}
		path := prefix + tag
		doc := docs[f.Name]
		if doc == "" {
			w.errs = append(w.errs, fmt.Errorf("%s: %s.%s has no doc comment", path, t.Name(), f.Name))
		}
		fv := v.FieldByIndex(f.Index)
		k := Key{Path: path, Type: typeName(f.Type), Doc: keyNames(doc, f.Name, tags)}
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
			fv = reflect.Zero(ft)
		}
		switch {
		case ft.Kind() == reflect.Struct && !isText(ft):
			w.keys = append(w.keys, k)
			w.walk(ft, fv, path+".")
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !isText(ft.Elem()):
			k.Default = value(fv)
			w.keys = append(w.keys, k)
			w.walk(ft.Elem(), reflect.Zero(ft.Elem()), path+"[].")
		default:
			k.Default = value(fv)
			w.keys = append(w.keys, k)
		}
	}
}

// goName is a Go identifier a doc comment may name a sibling field by:
// mixed case with two capitals at least (MaxBodyBytes, APIKey), so that
// plain words (URL, Input) are left alone.
var goName = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// keyNames rewrites doc for the reference: its first word, the field's
// name, and any sibling field named as a Go identifier become their keys,
// relative to the struct (tags), as the table's reader sees them beside
// the full key.
func keyNames(doc, name string, tags map[string]string) string {
	if rest, ok := strings.CutPrefix(doc, name); ok && (rest == "" || !isWordChar(rest[0])) {
		doc = "`" + tags[name] + "`" + rest
	}
	return goName.ReplaceAllStringFunc(doc, func(word string) string {
		tag, ok := tags[word]
		if !ok || !identifierLike(word) {
			return word
		}
		return "`" + tag + "`"
	})
}

func isWordChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func identifierLike(s string) bool {
	upper, lower := 0, 0
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z':
			upper++
		case r >= 'a' && r <= 'z':
			lower++
		}
	}
	return upper >= 2 && lower >= 1
}

var textType = reflect.TypeFor[encoding.TextMarshaler]()

func isText(t reflect.Type) bool { return t.Implements(textType) }

// typeName is what a key of type t takes, in the reference's words.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case isText(t):
		return "string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice:
		if e := t.Elem(); isText(e) || e.Kind() == reflect.String {
			return "list of strings"
		}
		return "list"
	case reflect.Struct, reflect.Pointer:
		return "section"
	}
	return t.Kind().String()
}

// value is v as YAML would say it, on one line.
func value(v reflect.Value) string {
	if v.Type() == durationType {
		return duration(time.Duration(v.Int()))
	}
	if isText(v.Type()) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return "?"
		}
		return quoted(string(b))
	}
	switch v.Kind() {
	case reflect.String:
		return quoted(v.String())
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		items := make([]string, v.Len())
		for i := range items {
			items[i] = value(v.Index(i))
		}
		return "[" + strings.Join(items, ", ") + "]"
	case reflect.Pointer:
		if v.IsNil() {
			return "null"
		}
		return value(v.Elem())
	case reflect.Struct:
		var fields []string
		for f := range v.Type().Fields() {
			if tag := f.Tag.Get("koanf"); tag != "" && tag != "-" && !v.FieldByIndex(f.Index).IsZero() {
				fields = append(fields, tag+": "+value(v.FieldByIndex(f.Index)))
			}
		}
		return "{" + strings.Join(fields, ", ") + "}"
	}
	return fmt.Sprint(v.Interface())
}

// quoted is s as YAML would say it: "" when empty.
func quoted(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// duration is d as the configuration is written: 1m, not 1m0s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
