package mgmt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// A member's agent joins a real station with nothing but the token: it
// finds the CA the token's hash names in the station's handshake.
func TestAgentJoinsStation(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.62.51", t.TempDir()))
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, reply, err := agent.Join(ctx, agent.Options{Stations: []string{ts.url}, Token: tok.Secret,
		State: t.TempDir(), Role: api.RoleNode, Name: "n1", Addr: "127.0.62.52:8080"})
	if err != nil {
		t.Fatalf("join with the token alone: %v", err)
	}
	if reply.Member != "n1" || a.Reply().Credential == "" {
		t.Fatalf("join reply: %+v", reply)
	}
}

// A station brought with its own certificate (--tls-cert, --tls-key,
// --tls-ca), whose certificate file holds the leaf only, also hands the
// CA over in the handshake.
func TestAgentJoinsStationOwnCert(t *testing.T) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "own CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.62.53")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	opt := stationOpts("127.0.62.53", filepath.Join(dir, "st"))
	opt.TLSCert, opt.TLSKey, opt.TLSCA = write("leaf.pem", "CERTIFICATE", leafDER), write("leaf.key", "EC PRIVATE KEY", kb), write("ca.pem", "CERTIFICATE", caDER)
	ts := startStation(t, opt)
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleIOD, TTL: time.Hour})
	if !strings.HasSuffix(tok.Secret, "."+api.CAHash(caDER)) {
		t.Fatalf("token %q does not pin the --tls-ca", tok.Secret)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := agent.Join(ctx, agent.Options{Stations: []string{ts.url}, Token: tok.Secret,
		Role: api.RoleIOD, Name: "i1"}); err != nil {
		t.Fatalf("join with the token alone: %v", err)
	}
}
