package mgmt

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

func TestMadeCAAndServerCert(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.17", t.TempDir()))
	for _, f := range []string{"ca.pem", "ca.key", "server.pem", "server.key"} {
		st, err := os.Stat(filepath.Join(ts.dir, "tls", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("tls/%s: %v %v", f, st, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(ts.dir, "tls", "server.pem"))
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.s.CA())
	for _, host := range []string{"127.0.52.17", "127.0.0.1", "::1", "localhost"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if d := time.Until(cert.NotAfter); d < 360*24*time.Hour || d > 367*24*time.Hour {
		t.Errorf("server certificate lasts %v", d)
	}
	// A client trusting another CA is refused by TLS.
	other, _ := newCA()
	c, _ := api.NewClient([]string{ts.url}, ts.admin, other.Cert)
	if err := c.Do(ctxT(t), "GET", api.RouteConfig, nil, nil); err == nil {
		t.Fatal("a client with another CA got through")
	}
}

func TestOwnCertificate(t *testing.T) {
	work := t.TempDir()
	ca, _ := newCA()
	cp, kp, err := ca.serverCert("127.0.52.18")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.pem": ca.Cert, "s.pem": cp, "s.key": kp} {
		os.WriteFile(filepath.Join(work, name), b, 0o600)
	}
	opt := stationOpts("127.0.52.18", filepath.Join(work, "data"))
	opt.TLSCert, opt.TLSKey, opt.TLSCA = filepath.Join(work, "s.pem"), filepath.Join(work, "s.key"), filepath.Join(work, "ca.pem")
	ts := startStation(t, opt)
	if CAHash(ts.s.CA()) != CAHash(ca.Cert) {
		t.Fatal("station does not hand out the given CA")
	}
	var v api.Version
	if err := ts.client(t, ts.admin).Do(ctxT(t), "GET", api.RouteConfig, nil, &v); err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", "127.0.52.18:7600", &tls.Config{RootCAs: func() *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(ca.Cert)
		return p
	}()})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// Half a pair is an error naming the flags.
	opt2 := stationOpts("127.0.52.19", t.TempDir())
	opt2.TLSCert = opt.TLSCert
	if _, err := New(opt2); err == nil {
		t.Fatal("cert without key accepted")
	}
}

// TestCAKeyOpenToOthersRefused: the CA's key signs every member's
// certificate; a station refuses it, naming the chmod, when others may
// read it (it loaded it before).
func TestCAKeyOpenToOthersRefused(t *testing.T) {
	dir := t.TempDir()
	if err := InitCA(dir); err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	if _, err := loadLocalCA(tlsDir); err != nil {
		t.Fatalf("a private CA key: %v", err)
	}
	key := filepath.Join(tlsDir, "ca.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadLocalCA(tlsDir); err == nil || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Fatalf("a CA key others may read: %v, want a refusal naming chmod 600", err)
	}
}
