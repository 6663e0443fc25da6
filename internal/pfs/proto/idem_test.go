package proto

import (
	"bytes"
	"testing"
)

func idemSamples() []Msg {
	return []Msg{
		&Idem{Client: 7, Seq: 3, Done: 2, Req: &Create{Parent: 1, Name: "f", Mode: 0o644, Excl: true}},
		&Idem{Client: 1<<63 + 5, Seq: 1, Done: 1, Req: &Rename{OldParent: 1, OldName: "a", NewParent: 2, NewName: "b"}},
	}
}

// TestIdemRefusesReadsAndNesting: only mutations carry request IDs.
func TestIdemRefusesReadsAndNesting(t *testing.T) {
	for _, inner := range []Msg{&GetAttr{Ino: 1}, &Idem{Client: 1, Seq: 1, Req: &Unlink{Parent: 1, Name: "x"}}, &Register{Addr: "a:1"}} {
		e := Enc{}
		(&Idem{Client: 1, Seq: 2, Req: inner}).Encode(&e)
		if _, err := Decode(OpIdem, e.B); err == nil {
			t.Errorf("Idem around %T decoded", inner)
		}
	}
	e := Enc{}
	(&Idem{Client: 1, Seq: 2}).Encode(&e)
	if _, err := Decode(OpIdem, e.B); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not a metadata mutation")) {
		t.Errorf("empty Idem: %v", err)
	}
}
