package proto

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// tap relays connections to addr and records both directions, as an
// eavesdropper on the path would.
type tap struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (tp *tap) Write(b []byte) (int, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.buf.Write(b)
}

func (tp *tap) seen(b []byte) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Contains(tp.buf.Bytes(), b)
}

func (tp *tap) len() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.buf.Len()
}

func startTap(t *testing.T, addr string) (string, *tap) {
	t.Helper()
	tp := &tap{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				nc.Close()
				return
			}
			go func() { io.Copy(io.MultiWriter(nc, tp), up); nc.Close() }()
			go func() { io.Copy(io.MultiWriter(up, tp), nc); up.Close() }()
		}
	}()
	return l.Addr().String(), tp
}

// TestEncryptedByDefault: with default settings on both sides, file data
// and names between a client and a server never cross the wire in clear;
// with Insecure on both they do (the test would see them).
func TestEncryptedByDefault(t *testing.T) {
	marker := []byte("corral-file-content-that-must-not-leak-7f3a")
	name := "corral-secret-file-name-91c2"
	plain := testSec
	plain.Insecure = true
	for _, c := range []struct {
		desc string
		sec  Security
		leak bool
	}{{"default", testSec, false}, {"insecure", plain, true}} {
		addr, _ := startWith(t, &Server{Handler: &counting{}, Security: c.sec})
		relay, tp := startTap(t, addr)
		p := Pool{Security: c.sec}
		if _, err := p.Call(context.Background(), relay, &Create{Parent: 1, Name: name}); err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		if _, err := p.Call(context.Background(), relay, &Write{Handle: 1, Data: bytes.Repeat(marker, 100)}); err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		p.Close()
		if tp.len() < 100*len(marker) {
			t.Fatalf("%s: the tap saw only %d bytes", c.desc, tp.len())
		}
		if got := tp.seen(marker) || tp.seen([]byte(name)); got != c.leak {
			t.Errorf("%s: file content or name in clear on the wire: %v, want %v", c.desc, got, c.leak)
		}
	}
}

// TestRelayInTheMiddle: a relay that terminates TLS on both sides (it can,
// since certificates are not what clients trust) cannot pass the
// handshake: the proofs cover each TLS session's exported value, and the
// relay holds two different sessions.
func TestRelayInTheMiddle(t *testing.T) {
	h := &counting{}
	addr, logs := startWith(t, &Server{Handler: h})
	cfg, err := EphemeralServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	mitm := fakeServer(t, func(nc net.Conn) {
		down := tls.Server(nc, cfg)
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		up := tls.Client(raw, defaultClientTLS())
		defer up.Close()
		go io.Copy(down, up)
		io.Copy(up, down)
	})
	_, err = Dial(context.Background(), mitm, testSec)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("through a TLS-terminating relay: %v, want ErrAuth", err)
	}
	waitLog(t, logs, "wrong cluster secret")
	if h.n.Load() != 0 {
		t.Errorf("handler ran %d times", h.n.Load())
	}
}

// TestInsecureMismatch: each side of a TLS/plain mismatch says what to
// change; a server given Insecure still serves TLS clients.
func TestInsecureMismatch(t *testing.T) {
	plain := testSec
	plain.Insecure = true
	addr, _ := startWith(t, &Server{Handler: &counting{}})
	_, err := Dial(context.Background(), addr, plain)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "requires TLS") {
		t.Errorf("insecure client to a default server: %v", err)
	}
	addr, _ = startWith(t, &Server{Handler: &counting{}, Security: plain})
	c, err := Dial(context.Background(), addr, testSec)
	if err != nil {
		t.Fatalf("default client to an insecure server: %v", err)
	}
	c.Close()
	// A plain-text server (an older version) hangs up on TLS: unavailable,
	// with a hint.
	old := fakeServer(t, func(nc net.Conn) {
		nc.SetReadDeadline(time.Now().Add(time.Second))
		nc.Read(make([]byte, HeaderLen))
	})
	if _, err := Dial(context.Background(), old, testSec); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("TLS client to a plain server that hangs up: %v", err)
	}
}
