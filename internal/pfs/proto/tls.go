package proto

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"syscall"
	"time"
)

// Encryption in transit. Every connection speaks TLS 1.3 unless both ends
// were told --insecure. Peers authenticate each other by a shared key
// rather than by certificates: a server presents a throwaway certificate,
// a client does not check it, and the key-proving handshake (auth.go), run
// inside TLS, covers a value exported from the TLS session (RFC 8446
// section 7.5, the "tls-exporter" channel binding of RFC 9266). A relay in
// the middle holds two TLS sessions with two different exported values, so
// proofs it relays fail on both sides; only peers that hold the key can
// finish the handshake over one session. This gives encryption by default
// with no certificate files. Certificates given with --tls-cert/--tls-ca
// (the station issues them at join) are checked as well, on top. The
// directors' sync (internal/ha) uses the same helpers with its group key.

// bindingLabel names the exporter value the handshake MACs cover.
const bindingLabel = "EXPORTER-corral-pfs-handshake-v1"

// TLSRecordHandshake is the first byte a TLS client sends (a handshake
// record); servers that also take plain text tell the two apart by it. A
// plain file-system client's first byte is the frame magic 'C'.
const TLSRecordHandshake = 0x16

const tlsRecordHandshake = TLSRecordHandshake

var ephemeral = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "corral (throwaway; peers authenticate by a shared key)"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
})

// EphemeralServerTLS is a TLS 1.3 server configuration with this process's
// throwaway certificate (made once), for servers given no certificate:
// clients authenticate the server by the bound handshake instead.
func EphemeralServerTLS() (*tls.Config, error) {
	c, err := ephemeral()
	if err != nil {
		return nil, fmt.Errorf("make a TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS13}, nil
}

// BoundClientTLS is a TLS 1.3 client configuration that does not check the
// server's certificate: the caller's bound handshake authenticates the
// server instead, which a certificate could not (it proves the shared key).
func BoundClientTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
}

func defaultClientTLS() *tls.Config { return BoundClientTLS() }

// TLSBinding is the 32-byte value of tc's session under label that the
// caller's handshake proofs must cover. tc must have finished its
// handshake; anything older than TLS 1.3 is refused.
func TLSBinding(tc *tls.Conn, label string) ([]byte, error) {
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete {
		return nil, errors.New("TLS handshake not complete")
	}
	if cs.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("TLS version %#x, want 1.3", cs.Version)
	}
	return cs.ExportKeyingMaterial(label, nil, 32)
}

// serverTLS is the configuration a server speaks TLS with.
func (s Security) serverTLS() (*tls.Config, error) {
	if s.TLSServer != nil {
		return s.TLSServer, nil
	}
	return EphemeralServerTLS()
}

// binding is the value of tc's session the handshake MACs cover.
func binding(tc *tls.Conn) ([]byte, error) { return TLSBinding(tc, bindingLabel) }

// sniffConn is a connection whose first bytes were peeked into r.
type sniffConn struct {
	net.Conn
	r io.Reader
}

func (c sniffConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// errPlain refuses a plain-text peer of a server that requires TLS.
var errPlain = errors.New("plain-text peer refused: this server requires TLS (the peer runs with --insecure; drop it, or give this server --insecure too)")

// acceptTLS decides, from the first byte a peer sends, between TLS and
// plain text, and returns the connection to run the handshake on with the
// channel binding (nil for plain text) and small buffers for it.
func (s *Server) acceptTLS(raw net.Conn) (net.Conn, *bufio.Reader, *bufio.Writer, []byte, error) {
	br := bufio.NewReaderSize(raw, 1024)
	first, err := br.Peek(1)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if first[0] != tlsRecordHandshake {
		bw := bufio.NewWriterSize(raw, 1024)
		if !s.Security.Insecure {
			refuse(bw, errPlain.Error())
			return nil, nil, nil, nil, errPlain
		}
		return raw, br, bw, nil, nil
	}
	cfg, err := s.Security.serverTLS()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tc := tls.Server(sniffConn{raw, br}, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	b, err := binding(tc)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, bufio.NewReaderSize(tc, 1024), bufio.NewWriterSize(tc, 1024), b, nil
}

// isResetOrEOF: the peer hung up on our TLS hello (a plain-text server).
func isResetOrEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// headConn records the first bytes read from a connection while TLS
// starts, to read a plain-text refusal from them if TLS fails.
type headConn struct {
	net.Conn
	head []byte
	done bool // TLS is up: stop recording
}

func (c *headConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.done && len(c.head) < HeaderLen+maxHandshake {
		c.head = append(c.head, b[:min(n, HeaderLen+maxHandshake-len(c.head))]...)
	}
	return n, err
}

// plainRefusal reads the Error frame a server sent in plain text where a
// TLS client expected its hello back: refusals made before TLS starts (too
// many connections from one address) or by a server that requires TLS of
// an insecure peer, whose reason is worth more than "not a TLS
// handshake". nil if the server sent no such frame.
func plainRefusal(hc *headConn, addr string) error {
	if len(hc.head) < HeaderLen || hc.head[0] != 'C' || hc.head[1] != 'R' {
		return nil
	}
	hc.SetReadDeadline(time.Now().Add(time.Second))
	op, b, err := decodeHSHeader(hc.head[:HeaderLen], io.MultiReader(bytes.NewReader(hc.head[HeaderLen:]), hc.Conn))
	if err != nil || op != OpError {
		return nil
	}
	return refusal(addr, b)
}
