package mgmt

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"

	"github.com/corral-cluster/corral/internal/mgmt/api"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Directors in an HA group elect through the station's etcd (package ha,
// keys under /corral/ha/GROUP/). A director's join reply carries what it
// needs for that (api.HAJoin): the etcd client URLs, a client certificate
// of the shared CA whose common name is the member's name, and the sync
// key. docs/mgmt.md, "Directors in an HA group".

const (
	// keyHA is the prefix of the directors' election keys; they live on
	// leases, so a backup does not carry them (restoring one would bring
	// back an active director that is long gone).
	keyHA = prefix + "ha/"
	// keyHAKey is the groups' shared sync key: 32 random bytes made once.
	keyHAKey = keyHA + "key"
	// haKeyLen is the sync key's length.
	haKeyLen = 32
	// etcdHARole is the etcd role of directors: read and write under
	// keyHA, nothing else (not the CA's key, not the tokens).
	etcdHARole = "corral-ha"
)

// haJoin is a director's HA part of its join reply, and the serial
// number (hex) of the certificate in it ("" without one).
func (s *Station) haJoin(ctx context.Context, member string) (*api.HAJoin, string, error) {
	if member == etcdRootUser {
		// The certificate's common name is the etcd user: "root" would
		// be the station's own.
		return nil, "", &inputError{fmt.Sprintf("join: a director may not be named %q (the station's etcd user)", member)}
	}
	key, err := s.haKey(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := s.etcdHAUser(ctx, member); err != nil {
		return nil, "", err
	}
	h := &api.HAJoin{Etcd: s.etcdClientURLs(ctx), SyncKey: key}
	serial := ""
	if s.ca != nil {
		cert, k, err := s.ca.clientCert(member)
		if err != nil {
			return nil, "", fmt.Errorf("join: etcd client certificate for %s: %w", member, err)
		}
		h.CA, h.Cert, h.Key = string(s.ca.Cert), string(cert), string(k)
		if b, _ := pem.Decode(cert); b != nil {
			if c, err := x509.ParseCertificate(b.Bytes); err == nil {
				serial = c.SerialNumber.Text(16)
			}
		}
	}
	return h, serial, nil
}

// haKey is the sync key in etcd, made (once, whoever is first) if absent.
func (s *Station) haKey(ctx context.Context) ([]byte, error) {
	k := make([]byte, haKeyLen)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keyHAKey), "=", 0)).
		Then(clientv3.OpPut(keyHAKey, string(k))).Else(clientv3.OpGet(keyHAKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("join: HA sync key in etcd (%s): %w", keyHAKey, err)
	}
	if resp.Succeeded {
		return k, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || len(kvs[0].Value) != haKeyLen {
		return nil, fmt.Errorf("join: HA sync key in etcd (%s) is not %d bytes", keyHAKey, haKeyLen)
	}
	return kvs[0].Value, nil
}

// etcdClientURLs are the client URLs directors reach etcd at: an
// external cluster's endpoints, else every member's advertised ones, the
// loopback ones left out when there are others (a director on another
// host cannot use them).
func (s *Station) etcdClientURLs(ctx context.Context) []string {
	if s.etcd == nil {
		return slices.Clone(s.opt.Etcd)
	}
	var all []string
	if resp, err := s.cli.MemberList(ctx); err == nil {
		for _, m := range resp.Members {
			all = append(all, m.ClientURLs...)
		}
	} else {
		s.log.Warn("etcd member list; giving this station's etcd only", "err", err)
	}
	if len(all) == 0 {
		all = []string{s.endpoint}
	}
	var far []string
	for _, u := range all {
		if !loopbackURL(u) {
			far = append(far, u)
		}
	}
	if len(far) > 0 {
		all = far
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// loopbackURL says whether u's host is a loopback address (or localhost).
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	if p.Hostname() == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(p.Hostname())
	return err == nil && ip.IsLoopback()
}

// setupEtcdAuth turns etcd's authentication on for an embedded member
// whose client listener takes certificates: the common name is the user;
// the station is root, a director a user of its own name with the role
// etcdHARole. Without it, a director's certificate would open the whole
// store (the CA's key, the tokens). Every step may be repeated (several
// stations, a setup tried again).
func (s *Station) setupEtcdAuth(ctx context.Context) error {
	ignore := func(err error, exists error) error {
		if errors.Is(err, exists) {
			return nil
		}
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"role " + etcdHARole, func() error {
			_, err := s.cli.RoleAdd(ctx, etcdHARole)
			return ignore(err, rpctypes.ErrRoleAlreadyExist)
		}},
		{"role " + etcdHARole + "'s permission on " + keyHA, func() error {
			_, err := s.cli.RoleGrantPermission(ctx, etcdHARole, keyHA, clientv3.GetPrefixRangeEnd(keyHA), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
	}
	st, err := s.cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("mgmt: etcd auth status: %w", err)
	}
	if !st.Enabled {
		steps = append(steps, []struct {
			what string
			do   func() error
		}{
			{"role root", func() error {
				_, err := s.cli.RoleAdd(ctx, "root")
				return ignore(err, rpctypes.ErrRoleAlreadyExist)
			}},
			{"user root", func() error {
				_, err := s.cli.UserAddWithOptions(ctx, etcdRootUser, "", &clientv3.UserAddOptions{NoPassword: true})
				return ignore(err, rpctypes.ErrUserAlreadyExist)
			}},
			{"user root's role", func() error {
				_, err := s.cli.UserGrantRole(ctx, etcdRootUser, "root")
				return err
			}},
			{"enabling auth", func() error {
				_, err := s.cli.AuthEnable(ctx)
				return err
			}},
		}...)
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("mgmt: etcd auth: %s: %w", st.what, err)
		}
	}
	// Directors that joined before (a restored backup, a station that
	// was on loopback) get their users: their credentials stand.
	recs, err := s.tokenRecords(ctx)
	if err != nil {
		return fmt.Errorf("mgmt: etcd auth: directors: %w", err)
	}
	for _, t := range recs {
		if t.Kind == kindMember && t.Role == api.RoleDirector && !t.Revoked && t.Member != "" && t.Member != etcdRootUser {
			if err := s.etcdHAUser(ctx, t.Member); err != nil {
				return fmt.Errorf("mgmt: etcd auth: %w", err)
			}
		}
	}
	return nil
}

// etcdHAUser makes member an etcd user of the role etcdHARole (its
// certificate's common name), when the station runs etcd's auth.
func (s *Station) etcdHAUser(ctx context.Context, member string) error {
	if s.etcdCA == nil {
		return nil
	}
	_, err := s.cli.UserAddWithOptions(ctx, member, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("join: etcd user %s: %w", member, err)
	}
	if _, err := s.cli.UserGrantRole(ctx, member, etcdHARole); err != nil {
		return fmt.Errorf("join: etcd user %s: role %s: %w", member, etcdHARole, err)
	}
	return nil
}

// dropEtcdHAUser deletes a director's etcd user: its revoked credential's
// certificate then opens nothing, on live connections too.
func (s *Station) dropEtcdHAUser(ctx context.Context, member string) {
	if s.etcdCA == nil || member == etcdRootUser {
		return
	}
	if _, err := s.cli.UserDelete(ctx, member); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		s.log.Warn("deleting a revoked director's etcd user", "member", member, "err", err)
	}
}
