package mgmt

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// The etcd client listener's certificate revocation list: the
// certificates of revoked director credentials. etcd reads the file on
// every new client connection, so a director that joined again under its
// name (a replaced machine) leaves the old certificate useless, though its
// common name, and so its etcd user, is the same.

// crlFile is the CRL's name in DATA/tls (DER).
const crlFile = "etcd.crl"

// crlValidity is the next-update horizon written into a CRL (etcd does
// not look at it; other readers may).
const crlValidity = 7 * 24 * time.Hour

// writeCRL writes a CRL signed by ca that lists serials (hex) to path.
func writeCRL(path string, ca *caPair, serials []string) error {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.RevocationList{Number: big.NewInt(now.UnixNano()), ThisUpdate: now, NextUpdate: now.Add(crlValidity)}
	for _, h := range serials {
		n, ok := new(big.Int).SetString(h, 16)
		if !ok {
			return fmt.Errorf("CRL: serial %q is not hex", h)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: now})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, caCert, caKey)
	if err != nil {
		return fmt.Errorf("CRL: %w", err)
	}
	// DER: etcd parses the file as it is (x509.ParseRevocationList).
	return writeFile0600(path, der)
}

// ensureCRL writes an empty CRL at path unless one is there: etcd refuses
// every TLS connection when the file is missing.
func ensureCRL(path string, ca *caPair) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeCRL(path, ca, nil)
}

// updateCRL rewrites the CRL from the token records: every revoked
// credential's etcd certificate.
func (s *Station) updateCRL(ctx context.Context) error {
	recs, err := s.tokenRecords(ctx)
	if err != nil {
		return err
	}
	var serials []string
	for _, t := range recs {
		if t.Kind == kindMember && t.Revoked && t.HASerial != "" {
			serials = append(serials, t.HASerial)
		}
	}
	return writeCRL(filepath.Join(s.opt.Data, "tls", crlFile), s.ca, serials)
}

// crlLoop rewrites the CRL at once and whenever kicked (a token record
// changed), until ctx ends.
func (s *Station) crlLoop(ctx context.Context) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.updateCRL(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("updating the etcd CRL", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue // try again; kicks meanwhile are covered
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.crlKick:
		}
	}
}

// kickCRL asks crlLoop for a rewrite (never blocks).
func (s *Station) kickCRL() {
	if s.crlKick == nil {
		return
	}
	select {
	case s.crlKick <- struct{}{}:
	default:
	}
}
