package sched

import (
	"fmt"
	"slices"
	"strings"
)

// Dataplanes are the director's dataplanes, in the order errors list them.
var Dataplanes = []string{"l4", "l7", "xdp"}

// carriedBy is the one scheduler x dataplane table: which dataplanes have
// each scheduler. mwlc needs each request's size, so only the HTTP proxy
// has it; the XDP dataplane has the others in the kernel (its tests check
// that internal/dataplane/xdp agrees).
var carriedBy = map[string][]string{
	"rr": {"l4", "l7", "xdp"}, "wrr": {"l4", "l7", "xdp"}, "lc": {"l4", "l7", "xdp"},
	"wlc": {"l4", "l7", "xdp"}, "sed": {"l4", "l7", "xdp"}, "nq": {"l4", "l7", "xdp"},
	"sh": {"l4", "l7", "xdp"}, "mh": {"l4", "l7", "xdp"},
	"mwlc": {"l7"},
}

// For lists the schedulers a dataplane has, sorted.
func For(dataplane string) []string {
	var out []string
	for name, dps := range carriedBy {
		if slices.Contains(dps, dataplane) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Supports says why a dataplane cannot run a scheduler, or nil if it can.
func Supports(scheduler, dataplane string) error {
	dps, ok := carriedBy[scheduler]
	if !ok {
		_, err := New(scheduler)
		return err
	}
	if !slices.Contains(Dataplanes, dataplane) {
		return fmt.Errorf("unknown dataplane %q (want %s)", dataplane, strings.Join(Dataplanes, ", "))
	}
	if slices.Contains(dps, dataplane) {
		return nil
	}
	if dataplane == "xdp" {
		return fmt.Errorf("%s is not in the XDP dataplane (it has %s)", scheduler, strings.Join(For("xdp"), ", "))
	}
	return fmt.Errorf("%s needs dataplane %s (%s has %s)", scheduler, strings.Join(dps, " or "), dataplane, strings.Join(For(dataplane), ", "))
}
