package proto

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var testSec = func() Security {
	c, err := NewSecret()
	if err != nil {
		panic(err)
	}
	return Security{Cred: c}
}()

// tlsConn dials addr and completes TLS only, returning the connection and
// its channel binding for writing the rest by hand.
func tlsConn(t *testing.T, addr string) (net.Conn, []byte) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(raw, defaultClientTLS())
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	b, err := binding(tc)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Time{})
	return tc, b
}

// authedConn dials addr and runs TLS and the client handshake with cred,
// returning the connection for writing frames by hand.
func authedConn(t *testing.T, addr string, cred *Credential) net.Conn {
	t.Helper()
	nc, bind := tlsConn(t, addr)
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	// An unbuffered-enough reader: the server sends nothing after Welcome
	// until we send a request, so nothing is lost in this bufio.Reader.
	if err := clientHandshake(bufio.NewReader(nc), bufio.NewWriter(nc), cred, addr, bind); err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Time{})
	return nc
}

// fakeTLS runs the server side of TLS on a fake server's connection and
// returns the handshake's buffers and channel binding.
func fakeTLS(nc net.Conn) (*bufio.Reader, *bufio.Writer, []byte, error) {
	cfg, err := EphemeralServerTLS()
	if err != nil {
		return nil, nil, nil, err
	}
	tc := tls.Server(nc, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, nil, nil, err
	}
	b, err := binding(tc)
	return bufio.NewReader(tc), bufio.NewWriter(tc), b, err
}

// closedByServer reads until the server closes; false on a timeout.
func closedByServer(nc net.Conn) bool {
	_, err := io.Copy(io.Discard, nc)
	return err == nil || !isTimeout(err)
}

func closedWithoutReply(nc net.Conn) bool {
	n, err := nc.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

// waitLog waits for want in the server's log: the server logs a connection's
// reason as it closes it, which can come after the client saw the close.
func waitLog(t *testing.T, logs *lockedWriter, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counting is a handler that counts the requests it ran and records the
// peer's credential kind.
type counting struct {
	n    atomic.Int64
	kind atomic.Int32
}

func (h *counting) Handle(ctx context.Context, req Msg) (Msg, error) {
	h.n.Add(1)
	h.kind.Store(int32(PeerKind(ctx)))
	if r, ok := req.(*Read); ok {
		return &DataReply{Data: make([]byte, r.Len)}, nil
	}
	return nil, nil
}

func startWith(t testing.TB, s *Server) (string, *lockedWriter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedWriter{w: &bytes.Buffer{}}
	s.Log = slog.New(slog.NewTextHandler(logs, nil))
	if s.Security.Cred == nil {
		s.Security.Cred = testSec.Cred
	}
	go s.Serve(l)
	t.Cleanup(s.Close)
	return l.Addr().String(), logs
}

func TestCredentialFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, SecretFileName)
	c, err := EnsureSecretFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode: %v %v", fi.Mode(), err)
	}
	again, err := EnsureSecretFile(p)
	if err != nil || again.key != c.key || again.Kind() != KindFull {
		t.Fatalf("second start made another secret: %v", err)
	}
	ro, err := ParseCredential(c.ReadOnly().Marshal())
	if err != nil || ro.Kind() != KindReadOnly || ro.key == c.key || ro.key != c.ReadOnly().key {
		t.Fatalf("read-only round trip: %+v %v", ro, err)
	}
	for _, bad := range []string{"", "corral-secret full", "corral-secret full abc", "corral-secret admin " + strings.Repeat("00", 32), "hello world x"} {
		if _, err := ParseCredential([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	os.WriteFile(filepath.Join(dir, "ro"), ro.Marshal(), 0o600)
	if _, err := EnsureSecretFile(filepath.Join(dir, "ro")); err == nil {
		t.Error("a read-only credential accepted as the cluster secret")
	}
}

func TestWrongSecret(t *testing.T) {
	h := &counting{}
	addr, logs := startWith(t, &Server{Handler: h})
	other, _ := NewSecret()
	p := Pool{Security: Security{Cred: other}}
	defer p.Close()
	_, err := p.Call(context.Background(), addr, &Unlink{Parent: 1, Name: "x"})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), addr+" refused us: wrong cluster secret") {
		t.Fatalf("got %v", err)
	}
	waitLog(t, logs, "wrong cluster secret")
	if !strings.Contains(logs.String(), "remote=127.0.0.1:") {
		t.Errorf("log does not name the peer:\n%s", logs)
	}
	if h.n.Load() != 0 {
		t.Errorf("a request of an unauthenticated peer ran")
	}
}

func TestNoSecret(t *testing.T) {
	addr, _ := startWith(t, &Server{Handler: &counting{}})
	var p Pool
	_, err := p.Call(context.Background(), addr, &Statfs{})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "--secret-file") {
		t.Fatalf("got %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := (&Server{Handler: &counting{}}).Serve(l); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("server without a secret: %v", err)
	}
}

// fakeServer accepts one connection and runs serve on it.
func fakeServer(t *testing.T, serve func(nc net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		serve(nc)
	}()
	return l.Addr().String()
}

// TestFakeServer: a server that does not know the secret cannot pass as
// one to a client, however it answers.
func TestFakeServer(t *testing.T) {
	cases := map[string]struct {
		serve func(nc net.Conn)
		want  string
	}{
		"accepts anything": {func(nc net.Conn) {
			br, bw := bufio.NewReader(nc), bufio.NewWriter(nc)
			readHS(br)
			writeHS(bw, OpChallenge, make([]byte, nonceLen))
			readHS(br)
			writeHS(bw, OpWelcome, make([]byte, 32))
			io.Copy(io.Discard, nc)
		}, "could not prove the cluster secret"},
		"replays a proof": {func(nc net.Conn) {
			br, bw := bufio.NewReader(nc), bufio.NewWriter(nc)
			readHS(br)
			ns := make([]byte, nonceLen)
			writeHS(bw, OpChallenge, ns)
			_, proof, _ := readHS(br)
			writeHS(bw, OpWelcome, proof) // the client's own MAC, echoed
			io.Copy(io.Discard, nc)
		}, "could not prove the cluster secret"},
		"http": {func(nc net.Conn) {
			nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		}, "is not a corral server"},
		"version 1": {func(nc net.Conn) {
			nc.Write([]byte{'C', 'R', 1, byte(OpError), 0, 0, 0, 0, 0, 0, 0, 0})
		}, "is not a corral server"},
		"hangs up": {func(nc net.Conn) {}, "closed the connection during the handshake"},
	}
	// The fakes speak the handshake in plain text: the client checks it
	// the same way inside TLS.
	plain := testSec
	plain.Insecure = true
	for name, c := range cases {
		addr := fakeServer(t, c.serve)
		_, err := Dial(context.Background(), addr, plain)
		want := ErrAuth
		if name == "hangs up" { // might be a server going down
			want = ErrUnavailable
		}
		if !errors.Is(err, want) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: got %v, want %v with %q", name, err, want, c.want)
		}
	}
}

// recorder relays one connection to addr and records what the client sent.
type recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(b)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf.Bytes()...)
}

// TestReplayedHandshake: the bytes of a successful session, replayed on a
// new connection, are refused and run nothing.
func TestReplayedHandshake(t *testing.T) {
	h := &counting{}
	// In plain text, where a replay could reach the handshake at all.
	plain := testSec
	plain.Insecure = true
	addr, logs := startWith(t, &Server{Handler: h, Security: plain})
	rec := &recorder{}
	proxy := fakeServer(t, func(nc net.Conn) {
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go io.Copy(nc, up)
		io.Copy(io.MultiWriter(up, rec), nc)
	})
	c, err := Dial(context.Background(), proxy, plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &Create{Parent: 1, Name: "f"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if h.n.Load() != 1 {
		t.Fatalf("handler ran %d times", h.n.Load())
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(rec.bytes())
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, _ := io.ReadAll(nc)
	// The server answers the replayed hello with a fresh challenge and the
	// replayed proof with a refusal.
	if !bytes.Contains(reply, []byte("wrong cluster secret")) {
		t.Errorf("replay not refused: %q", reply)
	}
	waitLog(t, logs, "wrong cluster secret")
	if h.n.Load() != 1 {
		t.Errorf("replayed request ran: handler ran %d times", h.n.Load())
	}
}

func TestReadOnlyCredential(t *testing.T) {
	h := &counting{}
	addr, _ := startWith(t, &Server{Handler: h})
	p := Pool{Security: Security{Cred: testSec.Cred.ReadOnly()}}
	defer p.Close()
	ctx := context.Background()
	for _, m := range []Msg{&Read{Handle: 1, Len: 10}, &Lookup{1, "a"}, &GetAttr{1}, &Readdir{Ino: 1}, &Statfs{}, &ObjStat{Handle: 1}, &Servers{}} {
		if _, err := p.Call(ctx, addr, m); err != nil {
			t.Errorf("%T refused to a reader: %v", m, err)
		}
	}
	if Kind(h.kind.Load()) != KindReadOnly {
		t.Errorf("handler saw kind %v", Kind(h.kind.Load()))
	}
	ran := h.n.Load()
	for _, m := range []Msg{&Write{Handle: 1, Data: []byte("x")}, &Create{Parent: 1, Name: "f"}, &Unlink{1, "a"}, &SetAttr{Ino: 1},
		&Register{ID: 1, Addr: "127.0.0.1:1"}, &Remove{Handle: 1}, &Truncate{Handle: 1}, &Rename{1, "a", 1, "b", 0}, &Sync{Handle: 1}, &SetXattr{Ino: 1, Name: "user.a"}, &Punch{Handle: 1, Len: 1}} {
		_, err := p.Call(ctx, addr, m)
		if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "read-only credential") {
			t.Errorf("%T by a reader: %v", m, err)
		}
	}
	if h.n.Load() != ran {
		t.Errorf("a refused request reached the handler")
	}
	// A full-secret client still writes.
	full := Pool{Security: testSec}
	defer full.Close()
	if _, err := full.Call(ctx, addr, &Unlink{1, "a"}); err != nil || Kind(h.kind.Load()) != KindFull {
		t.Errorf("full credential: %v, kind %v", err, Kind(h.kind.Load()))
	}
}

// testCerts makes a CA and a certificate for 127.0.0.1 signed by it.
func testCerts(t *testing.T) (certFile, keyFile, caFile string) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "corral test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	os.WriteFile(certFile, pemBlock("CERTIFICATE", der), 0o600)
	os.WriteFile(keyFile, pemBlock("EC PRIVATE KEY", keyDER), 0o600)
	os.WriteFile(caFile, pemBlock("CERTIFICATE", caDER), 0o600)
	return
}

func TestTLS(t *testing.T) {
	cert, key, ca := testCerts(t)
	srvTLS, cliTLS, err := LoadTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	addr, logs := startWith(t, &Server{Handler: h, Security: Security{Cred: testSec.Cred, TLSServer: srvTLS}})
	p := Pool{Security: Security{Cred: testSec.Cred, TLSClient: cliTLS}}
	defer p.Close()
	if m, err := p.Call(context.Background(), addr, &Read{Handle: 1, Len: 5}); err != nil || len(m.(*DataReply).Data) != 5 {
		t.Fatalf("over TLS: %v", err)
	}
	// TLS does not replace the secret: a TLS client with the wrong one is refused.
	other, _ := NewSecret()
	_, err = Dial(context.Background(), addr, Security{Cred: other, TLSClient: cliTLS})
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "wrong cluster secret") {
		t.Errorf("wrong secret over TLS: %v", err)
	}
	// A plain client is refused, saying why.
	plain := testSec
	plain.Insecure = true
	if _, err := Dial(context.Background(), addr, plain); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "requires TLS") {
		t.Errorf("plain client to a TLS server: %v", err)
	}
	waitLog(t, logs, "plain-text peer refused")
	// A client without --tls-ca still speaks TLS to it, trusting the
	// channel-bound handshake.
	if _, err := Dial(context.Background(), addr, testSec); err != nil {
		t.Errorf("default client to a server with a certificate: %v", err)
	}
	// A TLS client does not trust a server its CA did not sign.
	_, _, otherCA := testCerts(t)
	_, untrusting, _ := LoadTLS("", "", otherCA)
	if _, err := Dial(context.Background(), addr, Security{Cred: testSec.Cred, TLSClient: untrusting}); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("untrusted certificate: %v", err)
	}
	if _, _, err := LoadTLS(cert, "", ""); err == nil {
		t.Error("--tls-cert without --tls-key accepted")
	}
}

// FuzzHandshake feeds arbitrary bytes to both sides of the handshake: they
// fail with an error, never panic or allocate beyond the frame limit.
func FuzzHandshake(f *testing.F) {
	hello := append([]byte{'C', 'R', Version, byte(OpHello), 0, 0, 0, 0, 33, 0, 0, 0, byte(KindFull)}, make([]byte, 32)...)
	f.Add(hello)
	f.Add(append(hello, append([]byte{'C', 'R', Version, byte(OpProof), 0, 0, 0, 0, 32, 0, 0, 0}, make([]byte, 32)...)...))
	f.Add([]byte{'C', 'R', Version, byte(OpHello), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{'C', 'R', Version, byte(OpChallenge), 0, 0, 0, 0, 32, 0, 0, 0}, make([]byte, 32)...))
	f.Add([]byte{'C', 'R', Version, byte(OpError), 0, 0, 0, 0, 9, 0, 0, 0, 13, 0, 0, 0, 1, 0, 0, 0, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		bw := bufio.NewWriter(io.Discard)
		if _, err := serverHandshake(bufio.NewReader(bytes.NewReader(b)), bw, testSec.Cred, nil); err == nil {
			t.Fatal("fuzzed bytes passed the server's handshake")
		}
		if err := clientHandshake(bufio.NewReader(bytes.NewReader(b)), bw, testSec.Cred, "x", nil); err == nil {
			t.Fatal("fuzzed bytes passed the client's handshake")
		}
		if len(b) >= HeaderLen {
			if _, p, err := decodeHSHeader(b[:HeaderLen], bytes.NewReader(b[HeaderLen:])); err == nil && len(p) > maxHandshake {
				t.Fatalf("handshake payload of %d bytes accepted", len(p))
			}
		}
		if c, err := ParseCredential(b); err == nil {
			if d, err := ParseCredential(c.Marshal()); err != nil || *d != *c {
				t.Fatal("credential does not round-trip")
			}
		}
	})
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Secret files others may read are refused, as ssh refuses such a private
// key: the cluster secret, a read-only credential and a TLS key. The error
// names the file and the chmod that fixes it; 0600 and 0400 pass.
func TestSecretFilesOpenToOthersRefused(t *testing.T) {
	dir := t.TempDir()
	c, _ := NewSecret()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		for _, cred := range []*Credential{c, c.ReadOnly()} {
			p := filepath.Join(dir, "s")
			os.Remove(p)
			if err := os.WriteFile(p, cred.Marshal(), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, mode)
			_, err := LoadCredential(p)
			if !errors.Is(err, ErrSecretMode) || !strings.Contains(err.Error(), "chmod 600 "+p) {
				t.Fatalf("%s credential, mode %#o: %v, want a refusal naming chmod 600 %s", cred.Kind(), mode, err, p)
			}
			// Meta's first start does not overwrite it either.
			if _, err := EnsureSecretFile(p); !errors.Is(err, ErrSecretMode) {
				t.Fatalf("EnsureSecretFile on mode %#o: %v", mode, err)
			}
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		p := filepath.Join(dir, "s")
		os.Chmod(p, mode)
		if _, err := LoadCredential(p); err != nil {
			t.Fatalf("mode %#o: %v", mode, err)
		}
	}
	cert, key, ca := testCerts(t)
	os.Chmod(key, 0o644)
	if _, _, err := LoadTLS(cert, key, ca); !errors.Is(err, ErrSecretMode) || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Fatalf("TLS key of mode 0644: %v", err)
	}
	os.Chmod(key, 0o600)
	if _, _, err := LoadTLS(cert, key, ca); err != nil {
		t.Fatal(err)
	}
}
