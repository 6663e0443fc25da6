package mgmt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
)

// The station's TLS: a CA made on first start (kept in DATA/tls and, so
// that three stations share it, in etcd) and a server certificate it signs.

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
)

// caPair is a CA certificate and key, PEM encoded.
type caPair struct {
	Cert []byte `json:"cert"`
	Key  []byte `json:"key"`
}

// newCA makes a fresh CA (ECDSA P-256, 10 years).
func newCA() (*caPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "corral station CA", Organization: []string{"corral"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &caPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// parse returns the CA's certificate and key.
func (ca *caPair) parse() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(ca.Cert)
	if cb == nil {
		return nil, nil, errors.New("CA certificate: no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	kb, _ := pem.Decode(ca.Key)
	if kb == nil {
		return nil, nil, errors.New("CA key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	return cert, key, nil
}

// serverCert signs a server certificate (1 year) for host, 127.0.0.1, ::1
// and localhost; it returns the certificate and key PEM.
func (ca *caPair) serverCert(host string) (certPEM, keyPEM []byte, err error) {
	return ca.issue("corral station", host, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
}

// clientCert signs a client certificate (1 year) whose common name is cn:
// etcd takes it as the user name of the requests made with it.
func (ca *caPair) clientCert(cn string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(cn, "", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

// issue signs a certificate (1 year, ECDSA P-256) for cn with the given
// uses; a server one also names host, 127.0.0.1, ::1 and localhost.
func (ca *caPair) issue(cn, host string, usage []x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	return ca.issueNames(cn, host, true, usage)
}

// issueNames is issue; loopback says whether a server certificate names
// loopback and localhost besides host.
func (ca *caPair) issueNames(cn, host string, loopback bool, usage []x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"corral"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	if slices.Contains(usage, x509.ExtKeyUsageServerAuth) {
		if loopback {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		}
		if ip := net.ParseIP(host); ip != nil {
			if !ip.IsUnspecified() {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if host != "" && host != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// CAHash is the join token's pin of a CA: api.CAHashPEM, the first 32
// hex digits of the sha256 of the first certificate's DER in caPEM ("" if
// none). Members check it with the same function.
var CAHash = api.CAHashPEM

// loadLocalCA reads DATA/tls/ca.{pem,key}; nil, nil when absent.
func loadLocalCA(dir string) (*caPair, error) {
	c, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The CA's key signs every member's certificate: refused, as ssh
	// refuses a key, when others may read it.
	k, err := safefile.ReadSecret(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("%s: CA certificate without its key: %w", dir, err)
	}
	ca := &caPair{Cert: c, Key: k}
	if _, _, err := ca.parse(); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ca, nil
}

// writeFile0600 writes b to path (mode 0600, its directory 0700) through
// safefile: a crash or power cut leaves the old file or the new one, and
// concurrent writers never mix.
func writeFile0600(path string, b []byte) error {
	return safefile.WriteSecret(path, b)
}

// setupTLS decides the station's certificate: the operator's (--tls-*)
// or one signed by the shared CA, written to DATA/tls. It returns the
// server TLS config and the CA PEM members are given.
func (s *Station) setupTLS(ca *caPair) (*tls.Config, []byte, error) {
	if s.opt.TLSCert != "" || s.opt.TLSKey != "" {
		if s.opt.TLSCert == "" || s.opt.TLSKey == "" {
			return nil, nil, errors.New("--tls-cert and --tls-key go together")
		}
		if err := safefile.CheckSecret(s.opt.TLSKey); err != nil {
			return nil, nil, fmt.Errorf("--tls-key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(s.opt.TLSCert, s.opt.TLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		var caPEM []byte
		if s.opt.TLSCA != "" {
			if caPEM, err = os.ReadFile(s.opt.TLSCA); err != nil {
				return nil, nil, fmt.Errorf("--tls-ca: %w", err)
			}
			if CAHash(caPEM) == "" {
				return nil, nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", s.opt.TLSCA)
			}
			withCA(&cert, caPEM)
		} else {
			// Members need a certificate to pin (a join token without
			// one is refused by every member): the chain's last one, the
			// certificate itself when it is self-signed.
			last := cert.Certificate[len(cert.Certificate)-1]
			caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: last})
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, caPEM, nil
	}
	dir := filepath.Join(s.opt.Data, "tls")
	host, _, err := net.SplitHostPort(s.opt.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %q: %w", s.opt.Listen, err)
	}
	certPEM, keyPEM, err := ca.serverCert(host)
	if err != nil {
		return nil, nil, err
	}
	for name, b := range map[string][]byte{"ca.pem": ca.Cert, "ca.key": ca.Key, "server.pem": certPEM, "server.key": keyPEM} {
		if err := writeFile0600(filepath.Join(dir, name), b); err != nil {
			return nil, nil, err
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	withCA(&cert, ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ca.Cert, nil
}

// withCA adds the CA certificate in caPEM to the chain cert is served
// with, unless it is there: a member joining with a token knows the CA
// only by its hash (CAHash) and finds it in the handshake.
func withCA(cert *tls.Certificate, caPEM []byte) {
	b, rest := pem.Decode(caPEM)
	for b != nil && b.Type != "CERTIFICATE" {
		b, rest = pem.Decode(rest)
	}
	if b == nil || slices.ContainsFunc(cert.Certificate, func(c []byte) bool { return bytes.Equal(c, b.Bytes) }) {
		return
	}
	cert.Certificate = append(cert.Certificate, b.Bytes)
}

// InitCA makes one CA and writes it (ca.pem, ca.key, 0600, in a 0700
// DIR/tls) into each station data directory in dirs, before the stations'
// first start: stations that form one etcd cluster trust each other's
// peer certificates through it, so they must share it from the start.
// A directory that already has a CA is refused (copy that one instead).
func InitCA(dirs ...string) error {
	if len(dirs) == 0 {
		return errors.New("init-ca: no data directory")
	}
	for _, d := range dirs {
		ca, err := loadLocalCA(filepath.Join(d, "tls"))
		if err != nil {
			return fmt.Errorf("init-ca: %w", err)
		}
		if ca != nil {
			return fmt.Errorf("init-ca: %s already has a CA (%s): copy its ca.pem and ca.key to the others instead", d, filepath.Join(d, "tls", "ca.pem"))
		}
	}
	ca, err := newCA()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("init-ca: %w", err)
		}
		for name, b := range map[string][]byte{"ca.pem": ca.Cert, "ca.key": ca.Key} {
			if err := writeFile0600(filepath.Join(d, "tls", name), b); err != nil {
				return fmt.Errorf("init-ca: %w", err)
			}
		}
	}
	return nil
}
