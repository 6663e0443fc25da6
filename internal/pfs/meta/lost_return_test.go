package meta

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A server declared lost (LoseServer, or down past --lost-after) has its
// copies made again elsewhere; clients holding the old layout would still
// send it writes the new copies never get. So it is not readmitted with its
// old objects: its registration is refused (EAGAIN: the iod retries,
// answering EIO) saying to wipe it and replace it; the wiped disk is then
// accepted after `corral fs servers replace`.
func TestLostServerNotReadmittedWithItsObjects(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o) // servers 1..3 at 127.0.0.1:1..3, nothing listening there
		c := s.Cluster()
		call[*proto.ServersReply](t, s, &proto.LoseServer{ID: 2})
		for range 2 { // refused every time, not only once
			_, err := register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: c})
			if !errors.Is(err, syscall.EAGAIN) || !strings.Contains(err.Error(), "made again elsewhere") ||
				!strings.Contains(err.Error(), "Wipe its data directory") || !strings.Contains(err.Error(), "corral fs servers replace 2") {
				t.Fatalf("lost server 2 back with its objects: %v, want EAGAIN saying to wipe and replace it", err)
			}
			if st := stateOf(t, s, 2); st != proto.ServerLost {
				t.Fatalf("server 2 after its refused registration: %s, want lost", proto.StateName(st))
			}
		}
		// Wiped, then replaced: accepted.
		if _, err := register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: c, Fresh: true}); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("wiped server 2 before replace: %v, want EAGAIN", err)
		}
		call[*proto.ServersReply](t, s, &proto.ReplaceServer{ID: 2})
		if si, err := register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: c, Fresh: true}); err != nil || si.ID != 2 {
			t.Fatalf("replaced server 2: %+v %v", si, err)
		}
		if st := stateOf(t, s, 2); st != proto.ServerUp {
			t.Fatalf("server 2 after replace: %s, want up", proto.StateName(st))
		}
	})
}

// The same for a server lost by --lost-after.
func TestServerLostByTimeoutNotReadmitted(t *testing.T) {
	s, _ := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{LostAfter: time.Minute}, 2)
	s.iodsMu.Lock()
	s.heard[2] = time.Now().Add(-2 * time.Minute).UnixNano()
	s.iodsMu.Unlock()
	s.checkLost()
	var addr string
	for _, si := range call[*proto.ServersReply](t, s, &proto.Servers{}).Servers {
		if si.ID == 2 {
			addr = si.Addr
		}
	}
	_, err := register(t, s, &proto.Register{ID: 2, Addr: addr, Cluster: s.Cluster()})
	if !errors.Is(err, syscall.EAGAIN) || !strings.Contains(err.Error(), "corral fs servers replace 2") {
		t.Fatalf("server 2 lost by --lost-after, back with its objects: %v, want EAGAIN", err)
	}
	if st := stateOf(t, s, 2); st != proto.ServerLost {
		t.Fatalf("server 2: %s, want lost", proto.StateName(st))
	}
}
