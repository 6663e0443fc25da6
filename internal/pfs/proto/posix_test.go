package proto

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
)

func posixSamples() []Msg {
	return []Msg{
		&XattrReply{Value: []byte("v\x00")}, &Mknod{1, "p", 0o010644, 0, 1, 2},
		&Mknod{1, "c", 0o020600, 0x0103, 0, 0}, &SetXattr{3, "user.a", []byte("x"), XattrCreate},
		&GetXattr{3, "user.a"}, &ListXattr{3}, &RemoveXattr{3, "user.a"},
		&UnlinkOpen{1, "f"}, &ReleaseOrphan{9}, &RenewOrphans{Inos: []uint64{9, 10}},
		&Punch{1, 2, 4096, 8192}, &Alloc{1, 0, 0, 1 << 20},
	}
}

func TestPosixRoundTrip(t *testing.T) {
	for _, m := range posixSamples() {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, 7, m); err != nil {
			t.Fatal(err)
		}
		op, _, payload, err := ReadFrame(bufio.NewReader(&buf))
		if err != nil || op != m.Op() {
			t.Fatalf("%T: op %d err %v", m, op, err)
		}
		got, err := Decode(op, payload)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%T: got %+v want %+v", m, got, m)
		}
		for i := 0; i < len(payload); i++ {
			if _, err := Decode(op, payload[:i]); err == nil {
				t.Errorf("%T: prefix of %d/%d bytes decoded", m, i, len(payload))
			}
		}
	}
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

// FuzzDecodePosix: this file's messages either fail to decode or re-encode
// to the same bytes.
func FuzzDecodePosix(f *testing.F) {
	for _, m := range posixSamples() {
		var buf bytes.Buffer
		WriteFrame(&buf, 1, m)
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		op, id, payload, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		m, err := Decode(op, payload)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		WriteFrame(&buf, id, m)
		if !bytes.Equal(buf.Bytes(), b[:HeaderLen+len(payload)]) {
			t.Fatalf("re-encoding differs for %T", m)
		}
	})
}
