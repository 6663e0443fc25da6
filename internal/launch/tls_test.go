package launch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/loopsniff"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// portSniffer keeps the TCP payload of loopback packets to or from a set
// of ports: what an eavesdropper with a packet socket sees.
type portSniffer struct {
	*loopsniff.Sniffer
	mu    sync.Mutex
	ports map[uint16]bool
}

func sniffPorts(t *testing.T) *portSniffer {
	t.Helper()
	lab.Need(t, lab.Root) // a packet socket on lo
	s := &portSniffer{ports: map[uint16]bool{}}
	var err error
	s.Sniffer, err = loopsniff.Start(func(src, dst netip.AddrPort) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.ports[src.Port()] || s.ports[dst.Port()]
	})
	if err != nil {
		t.Fatalf("packet socket on lo: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *portSniffer) watch(addr string) {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	s.mu.Lock()
	s.ports[uint16(n)] = true
	s.mu.Unlock()
}

// TestFSEncryptedOnTheWire: the real meta and iods, started as launch (and
// so corral up) starts them, with no TLS flag: a file's content and name,
// written and read back by a client, never cross loopback in clear. With
// --insecure on every role and the client (the control) they do, and the
// daemons warn.
func TestFSEncryptedOnTheWire(t *testing.T) {
	bin := pfstest.Binary(t)
	r := make([]byte, 12)
	rand.Read(r)
	marker := hex.EncodeToString(r)
	content := bytes.Repeat([]byte("corral-tls-probe-content-"+marker+"\n"), 64)
	name := "corral-tls-probe-name-" + marker
	for _, insecure := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "insecure"}[insecure], func(t *testing.T) {
			sn := sniffPorts(t)
			f := &launch.FS{Bin: bin, Data: t.TempDir()}
			if insecure {
				f.Args = func(string) []string { return []string{"--insecure"} }
			}
			fsys, err := launch.StartFSWith(context.Background(), f, "127.0.0.1:0", []string{"127.0.0.1:0", "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer fsys.Stop()
			for _, p := range append([]*launch.Proc{fsys.Meta}, fsys.IODs...) {
				sn.watch(p.Addr)
			}
			sec := proto.Security{Cred: fsys.Cred, Insecure: insecure}
			cl := client.New(fsys.MetaAddr(), client.WithSecurity(sec))
			defer cl.Close()
			ctx := ctxT(t)
			if err := put(t, ctx, cl, "/"+name, content); err != nil {
				t.Fatal(err)
			}
			fh, err := cl.Open(ctx, "/"+name)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(content))
			if _, err := fh.ReadAt(got, 0); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("read back: %v", err)
			}
			fh.Close()
			time.Sleep(200 * time.Millisecond) // the last packets reach the sniffer
			if sn.Len() < 2*len(content) {
				t.Fatalf("the sniffer saw %d bytes", sn.Len())
			}
			if leak := sn.Seen(content[:64]) || sn.Seen([]byte(name)); leak != insecure {
				t.Errorf("file content or name in clear on loopback: %v, want %v", leak, insecure)
			}
			for _, p := range append([]*launch.Proc{fsys.Meta}, fsys.IODs...) {
				warned := strings.Contains(launch.Tail(p.Log, 50), "--insecure")
				if warned != insecure {
					t.Errorf("%s warned of --insecure: %v, want %v", p.Name, warned, insecure)
				}
			}
		})
	}
}
