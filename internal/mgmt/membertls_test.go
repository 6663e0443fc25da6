package mgmt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestJoinIssuesMemberCert: a joining member gets a certificate signed by
// the station's CA for its address only, for server use only (the
// station's etcd takes client certificates of the same CA, and a member's
// must not pass there, nor for the station on loopback), and its agent
// keeps it in State/tls (0700) as files of mode 0600.
func TestJoinIssuesMemberCert(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.62.54", t.TempDir()))
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleIOD, TTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := filepath.Join(t.TempDir(), "state")
	_, reply, err := agent.Join(ctx, agent.Options{Stations: []string{ts.url}, Token: tok.Secret,
		State: state, Role: api.RoleIOD, Name: "iod-a", Addr: "127.0.62.55:7100"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.TLS == nil {
		t.Fatal("the join reply carries no member certificate")
	}
	certFile, keyFile, caFile, ok := agent.TLSFiles(state)
	if !ok {
		t.Fatalf("no member certificate in %s", state)
	}
	if fi, err := os.Stat(filepath.Join(state, agent.TLSDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, mode %v; want 0700", agent.TLSDir, err, fi.Mode().Perm())
	}
	for _, f := range []string{certFile, keyFile, caFile} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(caFile)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("member certificate for server use: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("member certificate passes for client use (the station's etcd would take it)")
	}
	if err := leaf.VerifyHostname("127.0.62.55"); err != nil {
		t.Errorf("member certificate does not name the member's address: %v", err)
	}
	for _, other := range []string{"127.0.62.99", "127.0.0.1", "::1", "localhost"} {
		if err := leaf.VerifyHostname(other); err == nil {
			t.Errorf("member certificate names %s, not the member's address", other)
		}
	}
}
