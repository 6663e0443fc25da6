package ha

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

func TestWireRoundTrip(t *testing.T) {
	evs := []xdp.ConnEvent{
		{Op: xdp.OpNew, Conn: xdp.Conn{Client: netip.MustParseAddrPort("10.0.0.1:4000"), VIP: netip.MustParseAddrPort("127.0.81.100:80"), Proto: "tcp", Real: netip.MustParseAddr("10.9.0.2"), State: xdp.StateEstablished, Idle: 3 * time.Second}},
		{Op: xdp.OpDelete, Conn: xdp.Conn{Client: netip.MustParseAddrPort("[fd00::1]:53"), VIP: netip.MustParseAddrPort("[fd00::100]:53"), Proto: "udp", Real: netip.MustParseAddr("fd00::9"), State: xdp.StateUDP}},
	}
	for _, b := range [][]byte{
		batchFrame(7, evs), seqFrame(frameAck, 9), seqFrame(frameSnapshotEnd, 3), byeFrame("resync"),
		helloFrame("g1", "a", bytes.Repeat([]byte{1}, nonceLen)), appendFrame(nil, frameHeartbeat, nil),
	} {
		typ, p, err := readFrame(bytes.NewReader(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := decodeFrame(typ, p)
		if err != nil {
			t.Fatalf("type %d: %v", typ, err)
		}
		if typ == frameBatch && (f.seq != 7 || !reflect.DeepEqual(f.events, evs)) {
			t.Errorf("batch: %+v", f)
		}
		if typ == frameBye && f.reason != "resync" || typ == frameHello && (f.group != "g1" || f.name != "a") {
			t.Errorf("frame: %+v", f)
		}
	}
	if _, _, err := readFrame(bytes.NewReader([]byte{0x7f, 0, 0, 0, 4}), nil); err == nil {
		t.Error("a 2 GiB frame was accepted")
	}
}

// FuzzDecode: every byte string a peer may send decodes or fails cleanly,
// and what decodes encodes back to the same frame.
func FuzzDecode(f *testing.F) {
	f.Add(batchFrame(1, flowsEv(3)))
	f.Add(helloFrame("g", "n", make([]byte, nonceLen)))
	f.Add(byeFrame("x"))
	f.Add(seqFrame(frameAck, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, p, err := readFrame(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		fr, err := decodeFrame(typ, p)
		if err != nil {
			return
		}
		if typ == frameBatch {
			again, err := decodeFrame(frameBatch, batchFrame(fr.seq, fr.events)[5:])
			if err != nil || !reflect.DeepEqual(again.events, fr.events) && len(fr.events) > 0 {
				t.Fatalf("batch does not round-trip: %v", err)
			}
		}
	})
}

func flowsEv(n int) []xdp.ConnEvent {
	var evs []xdp.ConnEvent
	for _, c := range flows(n, 0) {
		evs = append(evs, xdp.ConnEvent{Op: xdp.OpNew, Conn: c})
	}
	return evs
}
