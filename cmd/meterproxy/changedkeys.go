package main

import (
	"reflect"
	"strings"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// changedKeys names the configuration keys in which a and b differ, as a
// user writes them (koanf tags, dotted: "server.shutdown_grace"), under
// prefix. Structs are walked field by field (a squashed one's fields as
// the enclosing struct's own); anything else — a list, a map, a
// duration — is one key, compared whole. Values are never returned,
// only keys, so a changed secret is named but not shown.
func changedKeys(prefix string, a, b reflect.Value) []string {
	if a.Kind() != reflect.Struct {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return nil
		}
		return []string{prefix}
	}
	var keys []string
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("koanf")
		if configcheck.Squashed(tag) { // its keys are the enclosing struct's
			keys = append(keys, changedKeys(prefix, a.Field(i), b.Field(i))...)
			continue
		}
		name := strings.Split(tag, ",")[0]
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, changedKeys(prefix+"."+name, a.Field(i), b.Field(i))...)
	}
	return keys
}

// changedConfigKeys names the keys in which configurations a and b differ
// ("classes.bulk.share", "callers", "prices"), in the order of Config's
// fields: what a reload changed. Never a value, so a changed secret is
// named and not shown.
func changedConfigKeys(a, b Config) []string {
	keys := []string{} // logged as [] when nothing changed
	for _, k := range changedKeys("", reflect.ValueOf(a), reflect.ValueOf(b)) {
		keys = append(keys, strings.TrimPrefix(k, "."))
	}
	return keys
}
