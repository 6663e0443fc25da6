package proto

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Security is how a process proves itself to its peers and protects its
// connections: the credential for the handshake (required) and TLS, which
// is on unless Insecure (see tls.go).
type Security struct {
	Cred *Credential
	// TLSServer is the certificate a Server presents; nil: a throwaway one.
	TLSServer *tls.Config
	// TLSClient, if set, verifies servers' certificates (by --tls-ca); nil:
	// the channel-bound handshake alone authenticates the server.
	TLSClient *tls.Config
	// Insecure: dial in plain text, and let a Server accept plain-text
	// peers besides TLS ones. Everything after the handshake is readable
	// and alterable on the wire.
	Insecure bool
}

// LoadTLS builds the TLS configurations from PEM files: a server one when
// certFile and keyFile are given, a client one (trusting caFile, or the
// system's roots without it) when caFile or certFile is given. All empty:
// no TLS.
func LoadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if (certFile == "") != (keyFile == "") {
		return nil, nil, errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		certPEM, err := os.ReadFile(certFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert: %w", err)
		}
		keyPEM, err := ReadPrivate(keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-key: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", certFile, keyFile, err)
		}
		server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	}
	if caFile != "" || certFile != "" {
		client = &tls.Config{MinVersion: tls.VersionTLS13}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
			}
			client.RootCAs = pool
		}
	}
	return server, client, nil
}

// Limits bound what one server spends on its peers. Zero fields take the
// defaults below.
type Limits struct {
	// Budget is the bytes in flight the server admits at once: request
	// payloads being read or handled and the data of Read replies. Past it
	// the server stops reading from connections until replies go out.
	Budget int64
	// PerIP is the most connections one peer address may hold.
	PerIP int
	// HandshakeTimeout bounds the authentication handshake.
	HandshakeTimeout time.Duration
	// PayloadTimeout bounds reading a frame's payload once its header came,
	// and writing one reply: a stalled or half-open peer is dropped.
	PayloadTimeout time.Duration
	// IdleTimeout closes a connection with nothing in flight for this long
	// (the client redials transparently).
	IdleTimeout time.Duration
}

// Defaults of Limits.
const (
	DefaultBudget = 64 << 20
	// DefaultPerIP: every process of one machine shares its address (all
	// of corral up's roles come from 127.0.0.1), and a member's connection
	// costs about 512 KiB of buffers, so 256 bounds one host to ~128 MiB.
	DefaultPerIP            = 256
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultPayloadTimeout   = 60 * time.Second
	DefaultIdleTimeout      = 10 * time.Minute
)

func (l Limits) withDefaults() Limits {
	if l.Budget <= 0 {
		l.Budget = DefaultBudget
	}
	if l.PerIP <= 0 {
		l.PerIP = DefaultPerIP
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.PayloadTimeout <= 0 {
		l.PayloadTimeout = DefaultPayloadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// budget is a counting semaphore of bytes. A request larger than the whole
// budget takes all of it (and so runs alone) rather than waiting forever.
type budget struct {
	mu     sync.Mutex
	cond   sync.Cond
	total  int64
	used   int64
	closed bool
	// waiting counts readers held back (tests observe back-pressure).
	waiting int
}

func newBudget(total int64) *budget {
	b := &budget{total: total}
	b.cond.L = &b.mu
	return b
}

// acquire waits until n bytes (at most the total) are free and takes them;
// it returns what it took, or -1 once the server is closing.
func (b *budget) acquire(n int64) int64 {
	if n <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, b.total)
	for b.used+n > b.total && !b.closed {
		b.waiting++
		b.cond.Wait()
		b.waiting--
	}
	if b.closed {
		return -1
	}
	b.used += n
	return n
}

func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

func (b *budget) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

// firstChunk is what a payload read allocates before any byte arrived.
const firstChunk = 256 << 10

// readPayloadN reads an n-byte payload: first into a buffer of at most
// firstChunk, and only once that is full into one of the whole size. A peer
// that announces a large frame and sends nothing costs 256 KiB; one that
// sends more is within the server's budget, taken for the whole payload
// before reading. Growing in smaller steps halved the throughput of 4 MiB
// writes (BenchmarkWrite4M: 1.5 against 2.5 GB/s), from the copies and the
// garbage.
func readPayloadN(r io.Reader, n uint32) ([]byte, error) {
	want := int(n)
	buf := make([]byte, 0, min(want, firstChunk))
	for len(buf) < want {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), want)
			copy(nb, buf)
			buf = nb
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < want {
			return nil, fmt.Errorf("payload of %d bytes: %w", n, noEOF(err))
		}
	}
	return buf, nil
}

// hostOf is the IP part of a peer address, the unit of the per-peer limit.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
