package launch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// portSniffer keeps the TCP payload of loopback packets to or from a set
// of ports: what an eavesdropper with a packet socket sees.
type portSniffer struct {
	mu    sync.Mutex
	ports map[uint16]bool
	data  bytes.Buffer
}

func sniffPorts(t *testing.T) *portSniffer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a packet socket on lo")
	}
	const ethPAll = 0x0300 // htons(ETH_P_ALL)
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, ethPAll)
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: ethPAll, Ifindex: lo.Index}); err != nil {
		t.Fatalf("bind packet socket: %v", err)
	}
	// A big buffer: on a loaded machine the reader falls behind, and a
	// packet socket drops what does not fit.
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 32<<20)
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	s := &portSniffer{ports: map[uint16]bool{}}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, _, err := syscall.Recvfrom(fd, buf, 0); err == nil {
				s.packet(buf[:n])
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done; syscall.Close(fd) })
	return s
}

func (s *portSniffer) watch(addr string) {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	s.mu.Lock()
	s.ports[uint16(n)] = true
	s.mu.Unlock()
}

func (s *portSniffer) packet(b []byte) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		return
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != syscall.IPPROTO_TCP || len(ip) < ihl+20 {
		return
	}
	tcp := ip[ihl:]
	off := int(tcp[12]>>4) * 4
	if len(tcp) < off {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports[binary.BigEndian.Uint16(tcp)] || s.ports[binary.BigEndian.Uint16(tcp[2:])] {
		s.data.Write(tcp[off:])
	}
}

func (s *portSniffer) seen(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.data.Bytes(), b)
}

func (s *portSniffer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Len()
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
			if sn.len() < 2*len(content) {
				t.Fatalf("the sniffer saw %d bytes", sn.len())
			}
			if leak := sn.seen(content[:64]) || sn.seen([]byte(name)); leak != insecure {
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
