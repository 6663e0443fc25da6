package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// Token is a parsed join token "ID.SECRET.CAHASH" (docs/mgmt.md).
type Token struct {
	ID, Secret string
	// CAHash is the first 32 hex digits of sha256 of the station CA
	// certificate's DER: the agent trusts the station that shows it.
	CAHash string
}

// ParseToken reads a join token; the error says what is wrong without
// repeating the secret.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return Token{}, fmt.Errorf("join token: want ID.SECRET.CAHASH (as 'corral mgmt token create' prints it), got %d part(s)", len(parts))
	}
	t := Token{ID: parts[0], Secret: parts[1], CAHash: strings.ToLower(parts[2])}
	if t.CAHash == "" {
		// A station serving plain http (--insecure, tests) has no CA to
		// pin; verify refuses such a token for an https station.
		return t, nil
	}
	if len(t.CAHash) != 32 {
		return Token{}, fmt.Errorf("join token %s: the CA hash has %d characters, want 32 hex digits", t.ID, len(t.CAHash))
	}
	if _, err := hex.DecodeString(t.CAHash); err != nil {
		return Token{}, fmt.Errorf("join token %s: the CA hash is not hex", t.ID)
	}
	return t, nil
}

// pinned checks a station's TLS certificate against a CA known only by
// its hash: some certificate the station sends must hash to it, and the
// server's certificate must be signed by that one for the name dialled.
// A station with plain http (tests) is not checked.
type pinned struct {
	hash string
	mu   sync.Mutex
	seen string // the hashes the station showed, when none matched
	used bool   // a TLS handshake happened
}

func (p *pinned) config(host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		// The chain is checked below against the pinned CA, not against
		// the system's roots, which never hold a station's own CA.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return p.verify(cs, host) },
	}
}

// transport dials TLS with the pin; each connection knows the host it
// dialled (an IP address is not in the handshake's state).
func (p *pinned) transport() *http.Transport {
	return &http.Transport{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		// Connecting and the handshake bounded: a hung station leaves
		// the call time to try the next.
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		d := tls.Dialer{Config: p.config(host)}
		return d.DialContext(dctx, network, addr)
	}}
}

func (p *pinned) verify(cs tls.ConnectionState, host string) error {
	p.mu.Lock()
	p.used = true
	p.mu.Unlock()
	if len(cs.PeerCertificates) == 0 {
		return errors.New("station sent no certificate")
	}
	if p.hash == "" {
		return errors.New("the join token names no CA (made by a station without TLS); give --station-ca FILE")
	}
	var ca *x509.Certificate
	var seen []string
	for _, c := range cs.PeerCertificates {
		h := api.CAHash(c.Raw)
		if h == p.hash {
			ca = c
			break
		}
		seen = append(seen, h)
	}
	if ca == nil {
		p.mu.Lock()
		p.seen = strings.Join(seen, ",")
		p.mu.Unlock()
		return errors.New("station's CA does not match the token's hash")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
	if err != nil {
		return fmt.Errorf("station certificate: %w", err)
	}
	return nil
}

// mismatch is the hashes shown by a station whose CA was not the
// token's, "" otherwise.
func (p *pinned) mismatch() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// insecure says no TLS was used (an http:// station).
func (p *pinned) insecure() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.used
}
