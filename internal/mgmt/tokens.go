package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/corral-cluster/corral/internal/clustercfg"
	"slices"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tokens: join tokens (made by an admin for a member role, with a TTL,
// single-use unless asked otherwise), members' credentials (made at join: role = the
// member's role, no expiry, revocable) and users' API tokens (login, or
// made by an admin). All are "ID.SECRET" on the wire (a join token adds
// ".CAHASH", the station CA's pin) and only sha256(SECRET) is stored.

func memberRole(r string) bool {
	return r == api.RoleDirector || r == api.RoleNode || r == api.RoleMeta || r == api.RoleIOD
}

// defaultJoinTTL is a join token's life when the request gives none.
const defaultJoinTTL = time.Hour

// createToken makes a join token or a user's API token.
func (s *Station) createToken(ctx context.Context, req api.TokenRequest, who string) (api.Token, error) {
	var t *tokenRecord
	var secret string
	switch {
	case memberRole(req.Role):
		if req.User != "" {
			return api.Token{}, &inputError{"token: a join token (role " + req.Role + ") has no user"}
		}
		ttl := req.TTL
		if ttl <= 0 {
			ttl = defaultJoinTTL
		}
		if req.SingleUse && req.MultiUse {
			return api.Token{}, &inputError{"token: single_use and multi_use both set (a join token is single-use unless multi_use)"}
		}
		t, secret = newToken(kindJoin, req.Role, who, ttl)
		t.SingleUse = !req.MultiUse
		if req.Cluster != "" {
			if req.Role != api.RoleNode {
				return api.Token{}, &inputError{"token: --cluster is for node join tokens (the logical cluster a new node enters)"}
			}
			if err := s.clusterExists(ctx, req.Cluster); err != nil {
				return api.Token{}, err
			}
			t.Cluster = req.Cluster
		}
	case req.Role == api.RoleAdmin || req.Role == api.RoleWebmaster || req.Role == api.RoleReadOnly || req.Role == "":
		if req.MultiUse || req.SingleUse {
			return api.Token{}, &inputError{"token: single_use and multi_use are for join tokens (an API token is used until it expires)"}
		}
		if req.User == "" {
			return api.Token{}, &inputError{"token: an API token needs user (or give a member role: director, node, meta, iod)"}
		}
		p, err := s.userPrincipal(ctx, req.User)
		if err != nil {
			var ae *authError
			if errors.As(err, &ae) {
				return api.Token{}, &inputError{"token: " + ae.msg}
			}
			return api.Token{}, err
		}
		if req.Role != "" && req.Role != p.Role {
			return api.Token{}, &inputError{fmt.Sprintf("token: user %q has role %s, not %s", req.User, p.Role, req.Role)}
		}
		ttl := req.TTL
		if ttl <= 0 {
			ttl = loginTTL
		}
		t, secret = newToken(kindAPI, p.Role, who, ttl)
		t.User = req.User
		t.SingleUse = false
	default:
		return api.Token{}, &inputError{fmt.Sprintf("token: unknown role %q (director, node, meta, iod; or admin, webmaster, read-only with user)", req.Role)}
	}
	e := &api.AuditEntry{User: who, Action: "token-create", Detail: fmt.Sprintf("%s token %s role %s", t.Kind, t.ID, t.Role)}
	if err := s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		return nil, []clientv3.Op{tokenPut(t)}, nil
	}); err != nil {
		return api.Token{}, err
	}
	out := t.api()
	out.Secret = t.ID + "." + secret
	if t.Kind == kindJoin {
		out.Secret += "." + CAHash(s.caPEM)
	}
	return out, nil
}

// tokenRecords is every stored token.
func (s *Station) tokenRecords(ctx context.Context) ([]*tokenRecord, error) {
	resp, err := s.cli.Get(ctx, keyTokens, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []*tokenRecord
	for _, kv := range resp.Kvs {
		var t tokenRecord
		if json.Unmarshal(kv.Value, &t) == nil {
			out = append(out, &t)
		}
	}
	return out, nil
}

// tokens lists every token (no secrets), oldest first. A member's
// credential shows its member name as User and its member role.
func (s *Station) tokens(ctx context.Context) ([]api.Token, error) {
	recs, err := s.tokenRecords(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Token, 0, len(recs))
	for _, t := range recs {
		out = append(out, t.api())
	}
	slices.SortFunc(out, func(a, b api.Token) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// tokenKeep is how long an expired API or join token stays listed before
// pruneTokens deletes it; logins would otherwise pile up for ever.
const tokenKeep = 24 * time.Hour

// pruneTokens deletes API and join tokens that expired before cutoff
// (member credentials and the bootstrap token never expire); it returns
// how many went.
func (s *Station) pruneTokens(ctx context.Context, cutoff time.Time) (int, error) {
	resp, err := s.cli.Get(ctx, keyTokens, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		var t tokenRecord
		if json.Unmarshal(kv.Value, &t) != nil || (t.Kind != kindAPI && t.Kind != kindJoin) ||
			t.Expires.IsZero() || !t.Expires.Before(cutoff) {
			continue
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return n, err
		}
		if tr.Succeeded {
			n++
		}
	}
	return n, nil
}

// pruneTokensEvery prunes at once and then hourly until ctx ends.
func (s *Station) pruneTokensEvery(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		if n, err := s.pruneTokens(pctx, time.Now().Add(-tokenKeep)); err != nil && ctx.Err() == nil {
			s.log.Warn("pruning expired tokens", "err", err)
		} else if n > 0 {
			s.log.Info("pruned expired tokens", "count", n)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// revokeToken revokes a token (a member's credential too).
func (s *Station) revokeToken(ctx context.Context, id, who string) error {
	if !keySegment(id, 64) {
		return &inputError{fmt.Sprintf("token: bad ID %q", id)}
	}
	e := &api.AuditEntry{User: who, Action: "token-revoke", Detail: id}
	var director string // a director whose live credential this is
	err := s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		director = ""
		t, rev, err := s.getToken(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if t == nil {
			return nil, nil, &notFoundError{"no token " + id}
		}
		ops := []clientv3.Op{tokenPut(t)}
		if t.Kind == kindMember && t.Member != "" && !t.Revoked {
			// The member's live credential (a rejoin revokes the old
			// one itself): it leaves the members list rather than show
			// as down for ever.
			ops = append(ops, clientv3.OpDelete(keyMembers+t.Member))
			if t.Role == api.RoleDirector {
				director = t.Member
			}
		}
		t.Revoked = true
		ops[0] = tokenPut(t)
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(keyTokens+id), "=", rev)}, ops, nil
	})
	if err == nil && director != "" {
		s.dropEtcdHAUser(ctx, director)
	}
	return err
}

// nameTakenError is a join under a name a member of another role holds (409).
type nameTakenError struct{ msg string }

func (e *nameTakenError) Error() string { return e.msg }

// join trades a join token for a member credential; an earlier
// credential of the same member name is revoked (a replaced machine). A
// name held by a member of another role is refused.
func (s *Station) join(ctx context.Context, bearerTok string, req api.JoinRequest) (api.JoinReply, error) {
	if bearerTok == "" {
		return api.JoinReply{}, &authError{"no join token: send Authorization: Bearer TOKEN"}
	}
	if !memberRole(req.Role) {
		return api.JoinReply{}, &inputError{fmt.Sprintf("join: role %q: want director, node, meta or iod", req.Role)}
	}
	if !keySegment(req.Name, 128) || strings.Contains(req.Name, " ") {
		return api.JoinReply{}, &inputError{fmt.Sprintf("join: bad member name %q", req.Name)}
	}
	// The address goes into the audit log and the events every dashboard
	// gets each second: a host:port, not a megabyte.
	if len(req.Addr) > 256 || strings.ContainsFunc(req.Addr, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return api.JoinReply{}, &inputError{fmt.Sprintf("join: bad address %.40q (want HOST:PORT)", req.Addr)}
	}
	var ha *api.HAJoin
	var haSerial string
	if req.Role == api.RoleDirector {
		// Before the token is used, so that a join failing here can be
		// tried again with a single-use token; but only for a token that
		// would join (the commit checks it again): no etcd user is made
		// for whoever asks.
		t, _, err := s.checkToken(ctx, bearerTok)
		if err == nil && t.Kind == kindJoin && t.Role == req.Role && !(t.SingleUse && t.Used) {
			if ha, haSerial, err = s.haJoin(ctx, req.Name); err != nil {
				return api.JoinReply{}, err
			}
		}
	}
	cred, secret := newToken(kindMember, req.Role, "join", 0)
	cred.Member = req.Name
	cred.HASerial = haSerial
	var tokID, tokCluster string
	e := &api.AuditEntry{User: "member " + req.Name, Action: "join"}
	err := s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		t, rev, err := s.checkToken(ctx, bearerTok)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case t.Kind != kindJoin:
			return nil, nil, &authError{"not a join token (make one with corral mgmt token create --role " + req.Role + ")"}
		case t.SingleUse && t.Used:
			return nil, nil, &authError{"token already used"}
		case t.Role != req.Role:
			return nil, nil, &forbidden{fmt.Sprintf("join token is for role %s, not %s", t.Role, req.Role)}
		}
		tokID, tokCluster = t.ID, t.Cluster
		t.Used = true
		cred.CreatedBy = "join token " + t.ID
		e.Detail = fmt.Sprintf("%s %s (%s) with token %s, credential %s", req.Role, req.Name, req.Addr, t.ID, cred.ID)
		ops := []clientv3.Op{tokenPut(t), tokenPut(cred)}
		old, err := s.tokenRecords(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range old {
			if o.Kind != kindMember || o.Member != req.Name || o.Revoked {
				continue
			}
			if o.Role != req.Role {
				return nil, nil, &nameTakenError{fmt.Sprintf("member name %q is a %s's (credential %s): a %s may not take it; "+
					"pick another name, or revoke that credential first (corral mgmt token revoke %s)", req.Name, o.Role, o.ID, req.Role, o.ID)}
			}
			if len(ops) < 100 {
				o.Revoked = true
				ops = append(ops, tokenPut(o))
			}
		}
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(keyTokens+t.ID), "=", rev)}, ops, nil
	})
	if err != nil {
		s.met.joins.WithLabelValues("refused").Inc()
		return api.JoinReply{}, err
	}
	s.met.joins.WithLabelValues("ok").Inc()
	s.event(api.Event{Kind: "join", Member: req.Name, Msg: fmt.Sprintf("%s %s joined (%s) with token %s", req.Role, req.Name, req.Addr, tokID)})
	if tokCluster != "" {
		// A new machine enters the pool by itself; failing that, it has
		// joined all the same and the event says why it is not serving.
		if err := s.enterCluster(ctx, req.Name, req.Addr, tokCluster, tokID); err != nil {
			s.event(api.Event{Kind: "join-error", Member: req.Name, Msg: fmt.Sprintf("node %s not added to cluster %s: %v", req.Name, tokCluster, err)})
		}
	}
	reply := api.JoinReply{Member: req.Name, Credential: cred.ID + "." + secret, CA: string(s.caPEM), Stations: s.stations(ctx)}
	reply.Secret = s.fsCredential(req.Role, req.Name)
	reply.HA = ha
	reply.TLS = s.memberTLS(req.Name, req.Addr)
	reply.Meta = s.opt.Meta
	if len(reply.Meta) == 0 {
		if ci, err := s.cfgInfo(ctx); err == nil {
			reply.Meta = ci.meta
		}
	}
	return reply, nil
}

// fsCredential is the file-system credential a member of role gets: the
// read-only one for nodes and directors, the cluster secret for meta and
// iods; nil (and a log line) when the station has none to give.
func (s *Station) fsCredential(role, name string) []byte {
	if len(s.opt.Secret) == 0 {
		s.log.Warn("no file-system secret given to the station (--secret-file): the member gets none", "member", name)
		return nil
	}
	c, err := proto.ParseCredential(s.opt.Secret)
	if err != nil {
		s.log.Error("station's file-system secret unreadable", "err", err)
		return nil
	}
	if role == api.RoleNode || role == api.RoleDirector {
		return c.ReadOnly().Marshal()
	}
	if c.Kind() != proto.KindFull {
		s.log.Warn("station holds only the read-only credential; meta and iods need the cluster secret", "member", name)
		return nil
	}
	return c.Marshal()
}

// clusterExists checks that the current configuration has the logical
// cluster name.
func (s *Station) clusterExists(ctx context.Context, name string) error {
	c, err := s.currentConfig(ctx)
	if err != nil {
		return err
	}
	for _, cl := range c.Clusters {
		if cl.Name == name {
			return nil
		}
	}
	return &inputError{fmt.Sprintf("token: cluster %q is not in the configuration (its clusters: section)", name)}
}

// enterCluster adds node name, serving at addr, to the logical cluster of
// its join token as a new version (author: the token), with the default
// domain of the cluster's other nodes, unless the
// configuration already has a node of that name (a replaced machine keeps
// its entry). A version applied meanwhile is retried on.
func (s *Station) enterCluster(ctx context.Context, name, addr, cluster, tokID string) error {
	for try := 0; ; try++ {
		cur, err := s.current(ctx)
		if err != nil {
			return err
		}
		c, err := clustercfg.Parse(fmt.Sprintf("version %d", cur.Version), []byte(cur.YAML))
		if err != nil {
			return err
		}
		if slices.ContainsFunc(c.Nodes, func(n clustercfg.Node) bool { return n.Name == name }) {
			return nil
		}
		n := clustercfg.Node{Name: name, Address: addr, Cluster: cluster}
		// Configured like its cluster's other nodes: they serve the same
		// sites, so the same default domain (a bare-IP request through
		// the VIP must not find a different site on the new node).
		for _, o := range c.Nodes {
			if o.Cluster == cluster && o.DefaultDomain != "" {
				n.DefaultDomain = o.DefaultDomain
				break
			}
		}
		v, _ := json.Marshal(n)
		_, err = s.tx(ctx, api.TxRequest{Base: cur.Version, Comment: fmt.Sprintf("node %s joined cluster %s", name, cluster),
			Ops: []api.TxOp{{Op: "put", Kind: "node", Value: v}}}, "join token "+tokID)
		var ce *conflictError
		if errors.As(err, &ce) && try < 5 {
			continue
		}
		return err
	}
}
