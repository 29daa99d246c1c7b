package classify

import "fmt"

// Class is the admission class of a request. The zero value is Interactive.
type Class uint8

const (
	// Interactive is traffic a person is waiting on.
	Interactive Class = iota
	// Bulk is imports, batch jobs and worker fleets.
	Bulk
)

// NumClasses is the number of classes; Class values index arrays of this length.
const NumClasses = 2

// Classes lists every class in index order.
var Classes = [NumClasses]Class{Interactive, Bulk}

// String returns the class name as used in config, headers and metric labels.
func (c Class) String() string {
	switch c {
	case Interactive:
		return "interactive"
	case Bulk:
		return "bulk"
	default:
		return fmt.Sprintf("class(%d)", uint8(c))
	}
}

// ParseClass parses "interactive" or "bulk".
func ParseClass(s string) (Class, error) {
	switch s {
	case "interactive":
		return Interactive, nil
	case "bulk":
		return Bulk, nil
	default:
		return 0, fmt.Errorf("classify: unknown class %q (want interactive or bulk)", s)
	}
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, so config files can say
// "interactive" or "bulk".
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Valid reports whether c is one of the defined classes (Interactive or Bulk).
func (c Class) Valid() bool { return c < NumClasses }
