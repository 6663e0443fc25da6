package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// The member's certificate from the join (api.MemberTLS), kept in
// State/tls: the directory 0700, every file 0600, written through a synced
// temporary file and renamed.
const (
	TLSDir      = "tls"
	TLSCertFile = "member.pem"
	TLSKeyFile  = "member.key"
	TLSCAFile   = "ca.pem"
)

// TLSFiles are the paths of the member certificate, its key and the
// station's CA in state; ok is false when the join gave none.
func TLSFiles(state string) (cert, key, ca string, ok bool) {
	d := filepath.Join(state, TLSDir)
	cert, key, ca = filepath.Join(d, TLSCertFile), filepath.Join(d, TLSKeyFile), filepath.Join(d, TLSCAFile)
	for _, f := range []string{cert, key} {
		if _, err := os.Stat(f); err != nil {
			return cert, key, ca, false
		}
	}
	return cert, key, ca, true
}

// saveTLS keeps the member certificate of the join reply and the CA it is
// signed by; a reply without one removes an earlier one.
func (a *Agent) saveTLS(t *api.MemberTLS) error {
	if a.opt.State == "" {
		return nil
	}
	d := filepath.Join(a.opt.State, TLSDir)
	if t == nil || t.Cert == "" || t.Key == "" {
		if err := os.RemoveAll(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("join: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("join: --state: %w", err)
	}
	// MkdirAll keeps the mode of a directory already there.
	if err := os.Chmod(d, 0o700); err != nil {
		return fmt.Errorf("join: --state: %w", err)
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{TLSCertFile, []byte(t.Cert)}, {TLSKeyFile, []byte(t.Key)}, {TLSCAFile, []byte(t.CA)}} {
		if err := writeSecret(filepath.Join(d, f.name), f.b); err != nil {
			return fmt.Errorf("join: saving the member certificate: %w", err)
		}
	}
	return syncDir(d)
}

// syncDir makes the directory's new entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
