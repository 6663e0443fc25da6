package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// secFlags are the file-system credential and TLS flags shared by every
// command that talks to meta or an iod.
type secFlags struct {
	secretFile, cert, key, ca string
	insecure                  bool
	// client: a client command (fs, mount), whose --secret-file also
	// comes from the per-user client configuration (clientcfg); set
	// before add.
	client bool
}

// add registers the flags; withSecret is false for meta, whose secret is
// DATA/cluster.secret.
func (s *secFlags) add(fs *pflag.FlagSet, withSecret bool) {
	switch {
	case withSecret && s.client:
		fs.StringVar(&s.secretFile, "secret-file", clientcfg.Secret.Value(),
			"cluster secret or read-only credential (meta's DATA/"+proto.SecretFileName+"; env "+proto.SecretEnv+"; else ./"+upSecretFile+" when it exists; else the client configuration's secret-file, which corral up writes)")
	case withSecret:
		fs.StringVar(&s.secretFile, "secret-file", secretFileDefault(),
			"cluster secret or read-only credential (meta's DATA/"+proto.SecretFileName+"; env "+proto.SecretEnv+"; else ./"+upSecretFile+" when it exists)")
	}
	fs.StringVar(&s.cert, "tls-cert", "", "TLS certificate (PEM) to serve file-system connections with")
	fs.StringVar(&s.key, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.StringVar(&s.ca, "tls-ca", "", "CA certificate (PEM) to verify servers' certificates with (TLS is on without it; the secret handshake authenticates servers)")
	fs.BoolVar(&s.insecure, "insecure", false, "plain text after the handshake: dial without TLS and accept plain-text peers (file data and names readable on the wire)")
}

// insecureWarning is logged by every process given --insecure.
const insecureWarning = "--insecure: file-system traffic is plain text; anyone on the path can read and alter file data and names"

// security loads the credential (required unless optional) and TLS files.
func (s *secFlags) security(optional bool) (proto.Security, error) {
	var sec proto.Security
	var err error
	if s.secretFile != "" {
		if sec.Cred, err = proto.LoadCredential(s.secretFile); err != nil {
			return sec, err
		}
	} else if !optional && s.client {
		return sec, clientcfg.Secret.Missing()
	} else if !optional {
		return sec, fmt.Errorf("no cluster secret: give --secret-file META_DATA/%s (or set %s)", proto.SecretFileName, proto.SecretEnv)
	}
	sec.TLSServer, sec.TLSClient, err = proto.LoadTLS(s.cert, s.key, s.ca)
	if sec.Insecure = s.insecure; s.insecure {
		slog.Warn(insecureWarning)
	}
	return sec, err
}

// joinedCert makes a joined member serve the file-system protocol with the
// certificate its station issued (agent state/tls), unless --tls-cert was
// given. Without one it serves with a throwaway certificate.
func (s *secFlags) joinedCert(sec *proto.Security, state string) error {
	if s.cert != "" {
		return nil
	}
	cert, key, _, ok := agent.TLSFiles(state)
	if !ok {
		return nil
	}
	srv, _, err := proto.LoadTLS(cert, key, "")
	if err != nil {
		return fmt.Errorf("member certificate from the join: %w", err)
	}
	sec.TLSServer = srv
	return nil
}

// limitFlags configure a server's proto.Limits.
type limitFlags struct {
	budget  string
	perIP   int
	idle    time.Duration
	payload time.Duration
}

func (l *limitFlags) add(fs *pflag.FlagSet, defBudget string) {
	fs.StringVar(&l.budget, "budget", defBudget, "bytes of requests and read replies in flight at once; past it, stop reading from connections")
	fs.IntVar(&l.perIP, "conns-per-ip", proto.DefaultPerIP, "most connections from one peer address")
	fs.DurationVar(&l.idle, "idle-timeout", proto.DefaultIdleTimeout, "close connections idle this long (clients redial)")
	fs.DurationVar(&l.payload, "payload-timeout", proto.DefaultPayloadTimeout, "drop a peer that takes longer to send a frame or read a reply")
}

func (l *limitFlags) limits() (proto.Limits, error) {
	b, err := parseSize(l.budget)
	if err != nil || b < 1<<20 {
		return proto.Limits{}, fmt.Errorf("--budget %q: want a size of at least 1M", l.budget)
	}
	if l.perIP < 1 || l.idle <= 0 || l.payload <= 0 {
		return proto.Limits{}, fmt.Errorf("--conns-per-ip, --idle-timeout and --payload-timeout must be positive")
	}
	return proto.Limits{Budget: b, PerIP: l.perIP, IdleTimeout: l.idle, PayloadTimeout: l.payload}, nil
}

// secretCmd prints the credential of --secret-file, or with --read-only the
// read-only credential derived from it (for web nodes and other readers).
func secretCmd(sf *secFlags) *cobra.Command {
	var readOnly, fresh bool
	var out string
	c := &cobra.Command{
		Use:   "secret --read-only [--secret-file META_DATA/cluster.secret] --out FILE",
		Short: "Print the read-only credential derived from the cluster secret",
		Long: `Write a credential file (mode 0600: servers and clients refuse a secret
others can read). With --read-only: the read-only credential derived
from the cluster secret; its holder can look up, list, stat and read, never
change anything (servers refuse with EROFS). Servers derive it from the
secret themselves, so it needs no distribution to them. Without --read-only
the credential of --secret-file is written as is. Without --out it goes to
standard output; a regular file there is set to mode 0600 first.

With --new: a new cluster secret (32 random bytes) written to --out, which
must not exist yet: the management station's, on a new cluster
(docs/deploy.md); every member gets it from the station when it joins.`,
		Example: `  corral fs secret --read-only --secret-file /var/lib/corral/meta/cluster.secret --out ro.secret
  corral node --secret-file ro.secret ...
  corral fs secret --new --out /var/lib/corral/cluster.secret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fresh {
				return newSecretFile(out, readOnly)
			}
			sec, err := sf.security(false)
			if err != nil {
				return err
			}
			c := sec.Cred
			if readOnly {
				c = c.ReadOnly()
			}
			if out != "" {
				if err := writeFileAtomic(out, c.Marshal(), 0o600); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				return nil
			}
			// "> FILE" made by the shell is 0644 under the usual umask:
			// the credential would be readable by all, and refused.
			if fi, err := os.Stdout.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
				if err := os.Stdout.Chmod(0o600); err != nil {
					return fmt.Errorf("standard output is a file others can read and its mode cannot be set to 0600 (%v): give --out FILE", err)
				}
			}
			_, err = os.Stdout.Write(c.Marshal())
			return err
		},
	}
	c.Flags().StringVar(&out, "out", "", "write the credential to this file (mode 0600, atomically) instead of standard output")
	c.Flags().BoolVar(&readOnly, "read-only", false, "derive the read-only credential")
	c.Flags().BoolVar(&fresh, "new", false, "make a new cluster secret in --out (which must not exist)")
	return c
}

// newSecretFile writes a fresh cluster secret to out, never over an
// existing file: that would cut the cluster's members off from each other.
func newSecretFile(out string, readOnly bool) error {
	if out == "" {
		return usageError{errors.New("--new needs --out FILE (a secret is not printed)")}
	}
	if readOnly {
		return usageError{errors.New("--new makes the cluster secret: derive the read-only one from it afterwards")}
	}
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("--out %s: exists already; a cluster keeps the secret it has (remove the file only if no member uses it)", out)
	}
	c, err := proto.NewSecret()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if _, err := f.Write(c.Marshal()); err != nil {
		f.Close()
		os.Remove(out)
		return fmt.Errorf("--out: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("--out: %w", err)
	}
	return f.Close()
}
