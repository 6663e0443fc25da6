package proto

import (
	"strings"
	"syscall"
	"testing"
)

// Every operation has a one-word label: metric labels and log fields.
func TestOpNames(t *testing.T) {
	for i := 0; i < 256; i++ {
		n := OpName(Op(i))
		if n == "" || strings.ContainsAny(n, " \t\n\"") {
			t.Errorf("op %d: label %q", i, n)
		}
	}
	for op, want := range map[Op]string{OpLookup: "lookup", OpRead: "read", OpUnlinkOpen: "unlink-open", OpList: "list-objects", OpIdentify: "identify"} {
		if got := OpName(op); got != want {
			t.Errorf("OpName(%d) = %q, want %q", op, got, want)
		}
	}
}

func TestResultLabel(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{Errorf(syscall.ENOENT, "x: no such file"), "enoent"},
		{(&Error{Errno: uint32(syscall.EEXIST), Msg: "exists"}).Err(), "eexist"},
		{syscall.ENOSPC, "enospc"},
		{errString("something else"), "eio"},
	} {
		if got := ResultLabel(c.err); got != c.want {
			t.Errorf("ResultLabel(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
