// Package configcheck collects configuration problems, each under the key
// that has it, so a configuration wrong in several places is refused once,
// with every key named. A package validates its own section with keys
// relative to it; whoever mounts the section in the file puts the
// problems under its key (Under), so no package assumes where it is
// mounted.
package configcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Ref is a key named in a problem's message, relative like Problem.Key, so
// that Under moves it with the key.
type Ref string

// Problem is one invalid value: its key and what is wrong with it.
type Problem struct {
	// Key is where the value is, relative to the validated section
	// ("header", "paths[0].prefix", or "[1].name" for a list).
	Key    string
	format string
	args   []any
}

// Error is "key: message".
func (p *Problem) Error() string {
	return p.Key + ": " + fmt.Sprintf(p.format, p.args...)
}

// Problems collects the problems of one section. The zero value is
// ready to use.
type Problems struct {
	list []error
}

// Add records that the value at key is wrong, in fmt's terms; Ref
// arguments name other keys.
func (p *Problems) Add(key, format string, args ...any) {
	p.list = append(p.list, &Problem{Key: key, format: format, args: args})
}

// Err returns every problem added, joined, or nil.
func (p *Problems) Err() error { return errors.Join(p.list...) }

// Under returns err with every Problem's key, and every key its message
// names, put under section: "classify" and "header" make
// "classify.header", "callers" and "[1].name" make "callers[1].name".
// Other errors pass unchanged.
func Under(section string, err error) error {
	if err == nil {
		return nil
	}
	list := flatten(err, nil)
	out := make([]error, 0, len(list))
	for _, e := range list {
		p, ok := errors.AsType[*Problem](e)
		if !ok {
			out = append(out, e)
			continue
		}
		moved := &Problem{Key: join(section, p.Key), format: p.format, args: make([]any, len(p.args))}
		for i, a := range p.args {
			if r, ok := a.(Ref); ok {
				a = Ref(join(section, string(r)))
			}
			moved.args[i] = a
		}
		out = append(out, moved)
	}
	return errors.Join(out...)
}

// flatten appends the errors err joins (at any depth), or err itself.
func flatten(err error, out []error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return append(out, err)
	}
	for _, e := range j.Unwrap() {
		out = flatten(e, out)
	}
	return out
}

func join(section, key string) string {
	if section == "" || strings.HasPrefix(key, "[") {
		return section + key
	}
	return section + "." + key
}

// OneOf reports whether v is one of values, and if not, what is wrong:
// "must be a, b or c, got "v"". One function serves a string setting's
// Valid, its UnmarshalText (a file naming another value is refused at
// load, by key) and its section's Validate, with one message.
func OneOf[T ~string](v T, values ...T) error {
	if slices.Contains(values, v) {
		return nil
	}
	names := make([]string, len(values))
	for i, x := range values {
		names[i] = string(x)
	}
	list := names[len(names)-1]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + list
	}
	return fmt.Errorf("must be %s, got %q", list, string(v))
}

// SetOneOf sets *dst to the text b if it is one of values (OneOf), for
// an UnmarshalText.
func SetOneOf[T ~string](dst *T, b []byte, values ...T) error {
	v := T(b)
	if err := OneOf(v, values...); err != nil {
		return err
	}
	*dst = v
	return nil
}

// SetOptional is SetOneOf for a setting that may be left unset: an empty
// text sets the zero value, which the setting's owner reads as its
// default or asks for where it is required. Typed defaults decode their
// unset fields as empty text, so such a setting must take it.
func SetOptional[T ~string](dst *T, b []byte, values ...T) error {
	if len(b) == 0 {
		*dst = ""
		return nil
	}
	return SetOneOf(dst, b, values...)
}

// Squashed reports whether a koanf struct tag's options name squash: the
// decoder then reads the field's keys as the enclosing struct's own, so
// whatever names keys by walking the config structs (the reference,
// internal/docgen; the keys a reload changed) walks such a field's struct
// in place, under the enclosing struct's prefix.
func Squashed(tag string) bool {
	_, opts, _ := strings.Cut(tag, ",")
	return slices.Contains(strings.Split(opts, ","), "squash")
}
