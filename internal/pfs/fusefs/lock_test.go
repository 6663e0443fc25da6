package fusefs_test

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"golang.org/x/sys/unix"
)

// gateProxy forwards TCP to target; while closed, bytes from clients wait
// (a metadata server that stopped answering, for this mount only).
type gateProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	closed bool
}

func newGateProxy(t *testing.T, target string) *gateProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { p.set(false); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); u.Close() })
			go p.pipe(u, c, true)
			go p.pipe(c, u, false)
		}
	}()
	return p
}

func (p *gateProxy) set(closed bool) {
	p.mu.Lock()
	p.closed = closed
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *gateProxy) pipe(dst, src net.Conn, gated bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if gated {
			p.mu.Lock()
			for p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				dst.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

// TestLockNotHeldAcrossNetwork: unlinking a file open here waits for the
// metadata server; meanwhile another operation on the same inode that
// needs only local state (the capability the kernel asks for on every
// write, cached while open) answers at once. It used to wait for the
// unlink: the inode's mutex was held across the round trip.
func TestLockNotHeldAcrossNetwork(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	proxy := newGateProxy(t, fsys.Meta.Addr)
	// Names cached: the unlink goes straight to FUSE, no revalidating
	// lookup first (which would wait for meta before any lock).
	mnt := mount(t, proxy.ln.Addr().String(), fusefs.Options{AttrTimeout: time.Hour})
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64)
	getcap := func() error {
		// By descriptor: a path lookup could wait on the directory the
		// unlink holds.
		_, err := unix.Fgetxattr(int(f.Fd()), "security.capability", buf)
		return err
	}
	// Cached while open: ENODATA from meta once.
	if err := getcap(); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("getxattr security.capability: %v, want ENODATA", err)
	}
	proxy.set(true) // meta stops answering this mount
	unlinked := make(chan error, 1)
	go func() { unlinked <- os.Remove(p) }()
	time.Sleep(300 * time.Millisecond) // let the unlink reach the stalled call
	select {
	case err := <-unlinked:
		t.Fatalf("unlink finished with meta stalled: %v", err)
	default:
	}
	got := make(chan error, 1)
	go func() { got <- getcap() }()
	select {
	case err := <-got:
		if !errors.Is(err, syscall.ENODATA) {
			t.Errorf("cached getxattr during a stalled unlink: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("getxattr on the inode waited for the stalled unlink (lock held across a network call)")
		proxy.set(false)
		<-got
	}
	proxy.set(false)
	if err := <-unlinked; err != nil {
		t.Fatalf("unlink: %v", err)
	}
}
