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
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
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
	// etcdHARole was the directors' etcd role of earlier versions: read
	// and write under all of keyHA (every group's keys, the sync key).
	// setupEtcdAuth deletes it.
	etcdHARole = "corral-ha"
	// etcdHARolePrefix + GROUP is the etcd role of the directors of
	// GROUP: read and write under keyHA+GROUP+"/" and nothing else (not
	// another group's keys, not the sync key, the CA's key or the
	// tokens). A director holds the role of the group the configuration
	// puts it in, or none.
	etcdHARolePrefix = "corral-ha-"
)

// etcdHAGroupRole is the etcd role of group's directors.
func etcdHAGroupRole(group string) string { return etcdHARolePrefix + group }

// directorGroups maps each director of c that is in an HA group to it.
func directorGroups(c *clustercfg.Config) map[string]string {
	m := map[string]string{}
	for _, d := range c.Directors {
		if d.HA != nil && d.HA.Group != "" && d.Name != etcdRootUser {
			m[d.Name] = d.HA.Group
		}
	}
	return m
}

// ensureHAGroupRole makes group's role with its one permission unless it
// is there: every change of etcd's auth data fails the requests
// authorised before it, so nothing is written that is already so.
func (s *Station) ensureHAGroupRole(ctx context.Context, group string) error {
	role := etcdHAGroupRole(group)
	p := keyHA + group + "/"
	end := clientv3.GetPrefixRangeEnd(p)
	if r, err := s.cli.RoleGet(ctx, role); err == nil {
		for _, pm := range r.Perm {
			if string(pm.Key) == p && string(pm.RangeEnd) == end && pm.PermType == clientv3.PermReadWrite {
				return nil
			}
		}
	} else if !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("etcd role %s: %w", role, err)
	} else if _, err := s.cli.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcd role %s: %w", role, err)
	}
	if _, err := s.cli.RoleGrantPermission(ctx, role, p, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("etcd role %s: permission on %s: %w", role, p, err)
	}
	return nil
}

// grantHAGroups gives the directors of c that have an etcd user the role
// of their group, taking nothing away: run before a version is stored, so
// a director that reads the version finds its group open to it. Roles it
// loses are taken by syncHARoles once the version is stored.
func (s *Station) grantHAGroups(ctx context.Context, c *clustercfg.Config) error {
	if s.etcdCA == nil {
		return nil
	}
	for name, group := range directorGroups(c) {
		u, err := s.cli.UserGet(ctx, name)
		if errors.Is(err, rpctypes.ErrUserNotFound) {
			continue // not joined: its join gives it the role
		}
		if err != nil {
			return fmt.Errorf("etcd user %s: %w", name, err)
		}
		if slices.Contains(u.Roles, etcdHAGroupRole(group)) {
			continue
		}
		if err := s.ensureHAGroupRole(ctx, group); err != nil {
			return err
		}
		if _, err := s.cli.UserGrantRole(ctx, name, etcdHAGroupRole(group)); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
			return fmt.Errorf("etcd user %s: role %s: %w", name, etcdHAGroupRole(group), err)
		}
	}
	return nil
}

// syncHAUser leaves member's etcd user with exactly the role of the group
// groups puts it in (none if none).
func (s *Station) syncHAUser(ctx context.Context, member string, groups map[string]string) error {
	u, err := s.cli.UserGet(ctx, member)
	if err != nil {
		return fmt.Errorf("etcd user %s: %w", member, err)
	}
	want := ""
	if g, ok := groups[member]; ok {
		want = etcdHAGroupRole(g)
		if !slices.Contains(u.Roles, want) {
			if err := s.ensureHAGroupRole(ctx, g); err != nil {
				return err
			}
			if _, err := s.cli.UserGrantRole(ctx, member, want); err != nil {
				return fmt.Errorf("etcd user %s: role %s: %w", member, want, err)
			}
		}
	}
	for _, r := range u.Roles {
		if r != want && (r == etcdHARole || strings.HasPrefix(r, etcdHARolePrefix)) {
			if _, err := s.cli.UserRevokeRole(ctx, member, r); err != nil && !errors.Is(err, rpctypes.ErrRoleNotGranted) {
				return fmt.Errorf("etcd user %s: revoking role %s: %w", member, r, err)
			}
		}
	}
	return nil
}

// syncHARoles gives every director's etcd user the role of its group in
// the current configuration and takes every other group's away.
func (s *Station) syncHARoles(ctx context.Context) error {
	groups, err := s.currentGroups(ctx)
	if err != nil {
		// Roles stay as they are until a version reads (versions are
		// validated when stored, so this is etcd failing, or a version
		// an older station stored).
		var ce configError
		if errors.As(err, &ce) {
			s.log.Warn("directors' etcd roles left as they are", "err", err)
			return nil
		}
		return err
	}
	users, err := s.cli.UserList(ctx)
	if err != nil {
		return fmt.Errorf("etcd users: %w", err)
	}
	for _, u := range users.Users {
		if u == etcdRootUser {
			continue
		}
		if err := s.syncHAUser(ctx, u, groups); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
			return err
		}
	}
	return nil
}

// haRolesLoop runs syncHARoles at once and whenever kicked (a version or
// a token record changed), until ctx ends.
func (s *Station) haRolesLoop(ctx context.Context) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.syncHARoles(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("directors' etcd roles", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.haKick:
		}
	}
}

// kickHA asks haRolesLoop for a pass (never blocks).
func (s *Station) kickHA() {
	if s.haKick == nil {
		return
	}
	select {
	case s.haKick <- struct{}{}:
	default:
	}
}

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
	// The role of earlier versions opened every group's keys and the
	// sync key to any director: gone (deleting a role takes it from
	// its users too).
	if _, err := s.cli.RoleDelete(ctx, etcdHARole); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("mgmt: etcd auth: deleting the old role %s: %w", etcdHARole, err)
	}
	ignore := func(err error, exists error) error {
		if errors.Is(err, exists) {
			return nil
		}
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{}
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

// etcdHAUser makes member an etcd user (its certificate's common name)
// with the role of the group the current configuration puts it in, when
// the station runs etcd's auth (an embedded member).
func (s *Station) etcdHAUser(ctx context.Context, member string) error {
	if s.etcdCA == nil {
		return nil
	}
	_, err := s.cli.UserAddWithOptions(ctx, member, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("join: etcd user %s: %w", member, err)
	}
	groups, err := s.currentGroups(ctx)
	var ce configError
	if errors.As(err, &ce) {
		// No group is known: the director gets no role now, and its
		// group's when a version that reads names it.
		s.log.Warn("director's etcd role: the current version does not read", "member", member, "err", err)
		groups, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("join: etcd user %s: %w", member, err)
	}
	if err := s.syncHAUser(ctx, member, groups); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// configError is a current version that does not parse.
type configError struct{ err error }

func (e configError) Error() string { return "current configuration: " + e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// currentGroups is directorGroups of the current version.
func (s *Station) currentGroups(ctx context.Context) (map[string]string, error) {
	v, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(v.YAML) == "" {
		return map[string]string{}, nil
	}
	c, err := clustercfg.Parse(fmt.Sprintf("version %d", v.Version), []byte(v.YAML))
	if err != nil {
		return nil, configError{err}
	}
	return directorGroups(c), nil
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
