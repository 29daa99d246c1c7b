package main

import (
	"reflect"
	"strings"
)

// changedKeys names the configuration keys in which a and b differ, as a
// user writes them (koanf tags, dotted: "server.shutdown_grace"), under
// prefix. Structs are walked field by field; anything else — a list, a
// map, a duration — is one key, compared whole. Values are never
// returned, only keys, so a changed secret is named but not shown.
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
		name := strings.Split(f.Tag.Get("koanf"), ",")[0]
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
