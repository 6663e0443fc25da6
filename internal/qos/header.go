package qos

import (
	"fmt"
	"strconv"
	"strings"
)

// Header carries a request's class from the director to the node:
//
//	X-Corral-Class: gold; priority=10; nice=0
//
// The director deletes any such header a client sent and sets its own;
// the node believes it only from addresses it trusts (node.Config.QoSTrust:
// the directors'), and serves a request without a trusted one as the
// lowest class.
const Header = "X-Corral-Class"

// MaxHeader bounds the header's length (a name is at most 32 bytes).
const MaxHeader = 128

// Tag is what the header says.
type Tag struct {
	Name     string
	Priority int
	Nice     int // 0..19
}

// Tag is the class's header value.
func (k *Class) Tag() Tag { return Tag{Name: k.Name, Priority: k.Priority, Nice: k.Nice} }

// String is the header's value.
func (t Tag) String() string {
	return fmt.Sprintf("%s; priority=%d; nice=%d", t.Name, t.Priority, t.Nice)
}

// ParseTag reads a header value; it accepts exactly what String writes
// (any order of the two parameters, spaces around ';').
func ParseTag(v string) (Tag, error) {
	var t Tag
	if len(v) > MaxHeader {
		return t, fmt.Errorf("%s: longer than %d bytes", Header, MaxHeader)
	}
	parts := strings.Split(v, ";")
	if len(parts) != 3 {
		return t, fmt.Errorf("%s %q: want NAME; priority=P; nice=N", Header, v)
	}
	t.Name = strings.TrimSpace(parts[0])
	if !ValidName(t.Name) {
		return t, fmt.Errorf("%s %q: bad class name", Header, v)
	}
	var gotP, gotN bool
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil || len(val) > 11 {
			return t, fmt.Errorf("%s %q: want key=integer", Header, v)
		}
		switch {
		case k == "priority" && !gotP:
			t.Priority, gotP = n, true
		case k == "nice" && !gotN:
			if n < 0 || n > 19 {
				return t, fmt.Errorf("%s %q: nice %d out of 0..19", Header, v, n)
			}
			t.Nice, gotN = n, true
		default:
			return t, fmt.Errorf("%s %q: unknown or repeated %q", Header, v, k)
		}
	}
	return t, nil
}
