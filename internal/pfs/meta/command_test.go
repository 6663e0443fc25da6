package meta

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func commandSamples() []*command {
	return []*command{
		{Kind: cmdReq, Now: 42, Client: 7, Seq: 3, Done: 2, DefSize: 1 << 16, Picked: []uint32{2, 3, 1}, Registered: 3, Summary: "3 up",
			Zones: []string{"a", "", "b"}, Whole: []uint32{3, 1, 2},
			Req: &proto.Create{Parent: 1, Name: "f", Mode: 0o644, Excl: true, Replicas: 2}},
		{Kind: cmdServer, Now: 1, Server: proto.ServerInfo{ID: 2, Addr: "127.0.0.1:1", Capacity: 10, Free: 5, Seen: 9}, NewID: true, Base: true},
		{Kind: cmdReclaim, Ino: 9, Left: []uint32{0, 4}, Pending: true},
		{Kind: cmdReap, Cut: -5, Inos: []uint64{1, 2}},
		{Kind: cmdInit, Cluster: "0123456789abcdef"},
		{Kind: cmdReq, Now: 43, Client: 7, Seq: 4, Done: 2, Picked: []uint32{1, 2}, Registered: 2,
			Req: &proto.Create{Parent: 1, Name: "g", Mode: 0o644, Excl: true, Reserved: 12, Size: 4096}},
		{Kind: cmdReq, Now: 44, Client: 7, Seq: 5, Done: 2, Picked: []uint32{2, 1}, Registered: 2, Zones: []string{"", ""}, Whole: []uint32{1, 2},
			Req: &proto.Reserve{Parent: 1, Count: 64}},
		{Kind: cmdUnreserve, Now: 45, Inos: []uint64{12, 13}},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range commandSamples() {
		b := c.encode()
		got, err := decodeCommand(b)
		if err != nil {
			t.Fatalf("kind %d: %v", c.Kind, err)
		}
		if !bytes.Equal(got.encode(), b) {
			t.Errorf("kind %d: re-encoding differs", c.Kind)
		}
		if !reflect.DeepEqual(got.Zones, c.Zones) && len(c.Zones) > 0 || !reflect.DeepEqual(got.Whole, c.Whole) && len(c.Whole) > 0 {
			t.Errorf("kind %d: placement %v %v, want %v %v", c.Kind, got.Zones, got.Whole, c.Zones, c.Whole)
		}
		if c.Req != nil && !reflect.DeepEqual(got.Req, c.Req) {
			t.Errorf("kind %d: request %+v, want %+v", c.Kind, got.Req, c.Req)
		}
		for i := 0; i < len(b); i++ {
			if _, err := decodeCommand(b[:i]); err == nil {
				t.Errorf("kind %d: prefix of %d/%d bytes decoded", c.Kind, i, len(b))
			}
		}
	}
}

// FuzzCommand: a corrupt log entry is an error, never a crash; what
// decodes encodes back to the same bytes.
func FuzzCommand(f *testing.F) {
	for _, c := range commandSamples() {
		f.Add(c.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCommand(b)
		if err != nil {
			return
		}
		if _, err := decodeCommand(c.encode()); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
