package proto

import "testing"

func posixSamples() []Msg {
	return []Msg{
		&XattrReply{Value: []byte("v\x00")}, &Mknod{1, "p", 0o010644, 0, 1, 2},
		&Mknod{1, "c", 0o020600, 0x0103, 0, 0}, &SetXattr{3, "user.a", []byte("x"), XattrCreate},
		&GetXattr{3, "user.a"}, &ListXattr{3}, &RemoveXattr{3, "user.a"},
		&UnlinkOpen{1, "f"}, &WalkBeneath{"/www/a.test", "/x/../y"}, &ReleaseOrphan{9}, &RenewOrphans{Inos: []uint64{9, 10}},
		&Punch{1, 2, 4096, 8192}, &Alloc{1, 0, 0, 1 << 20},
	}
}

// TestRoundTrip and FuzzDecode cover these messages with the others.
func TestPosixOpRanges(t *testing.T) {
	if isReply(OpMknod) || !isReply(OpXattr) {
		t.Error("posix ops are in the wrong request/reply range")
	}
}

func TestRdev(t *testing.T) {
	for _, c := range []struct {
		mode uint32
		want uint32
	}{{0o020600, 77}, {0o060600, 77}, {0o100644, 0}, {0o010644, 0}, {0o040755, 0}} {
		a := Attr{Mode: c.mode, StripeSize: 77}
		if got := a.Rdev(); got != c.want {
			t.Errorf("mode %o: Rdev %d, want %d", c.mode, got, c.want)
		}
	}
}
