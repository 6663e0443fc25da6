package mgmt

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// Principal is who made a call: a user (by an API token or the bootstrap
// admin token) or a member (by its join credential).
type Principal struct {
	Name    string   // user name, or member name
	Role    string   // api.RoleAdmin, RoleWebmaster, RoleReadOnly, or a member role
	Domains []string // a webmaster's domains
	Member  bool     // a member's credential
}

// Permission levels a route needs.
const (
	permRead   = "read"   // any user (read-only and up) or member
	permAdmin  = "admin"  // admin users
	permMember = "member" // a member's credential
	permWeb    = "web"    // admin, or a webmaster (the handler checks the domain)
)

// Accounts: the configuration's accounts: section says who exists, with
// which role and domains (a webmaster also gets every domain naming them
// as webmaster); the store keeps only password hashes (users/NAME) and
// tokens. "admin" always exists, as admin. A user removed from the
// configuration can no longer log in nor use their tokens.

// Token kinds (tokenRecord.Kind).
const (
	kindJoin      = "join"      // joins a member once (or until it expires)
	kindMember    = "member"    // a member's credential
	kindAPI       = "api"       // a user's API token
	kindBootstrap = "bootstrap" // DATA/admin.token
)

// tokenRecord is a token at rest: only the hash of its secret.
type tokenRecord struct {
	ID        string    `json:"id"`
	Hash      string    `json:"hash"` // hex sha256 of the secret
	Kind      string    `json:"kind"`
	Role      string    `json:"role"`
	User      string    `json:"user,omitempty"`
	Member    string    `json:"member,omitempty"`
	Cluster   string    `json:"cluster,omitempty"` // node join token: the logical cluster a new node enters
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
	Expires   time.Time `json:"expires,omitempty"` // zero: never
	SingleUse bool      `json:"single_use,omitempty"`
	Used      bool      `json:"used,omitempty"`
	Revoked   bool      `json:"revoked,omitempty"`
	// HASerial is the serial number (hex) of the etcd client certificate
	// a director's join issued with this credential: once the credential
	// is revoked, the stations' etcd CRL lists it.
	HASerial string `json:"ha_serial,omitempty"`
}

func (t *tokenRecord) api() api.Token {
	u := t.User
	if t.Kind == kindMember {
		u = t.Member
	}
	return api.Token{ID: t.ID, Role: t.Role, User: u, Cluster: t.Cluster, Created: t.Created, CreatedBy: t.CreatedBy,
		Expires: t.Expires, SingleUse: t.SingleUse, Used: t.Used, Revoked: t.Revoked}
}

// userRecord is a user's password hash.
type userRecord struct {
	Name    string    `json:"name"`
	Hash    string    `json:"hash"` // bcrypt
	Changed time.Time `json:"changed"`
}

// authError is a 401 with its reason.
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// forbidden is a 403.
type forbidden struct{ msg string }

func (e *forbidden) Error() string { return e.msg }

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// newToken makes a record and its secret; the caller stores it.
func newToken(kind, role, by string, ttl time.Duration) (*tokenRecord, string) {
	secret := randHex(32)
	t := &tokenRecord{ID: randHex(8), Hash: hashSecret(secret), Kind: kind, Role: role,
		Created: time.Now().UTC(), CreatedBy: by}
	if ttl > 0 {
		t.Expires = t.Created.Add(ttl)
	}
	return t, secret
}

func tokenPut(t *tokenRecord) clientv3.Op {
	b, _ := json.Marshal(t)
	return clientv3.OpPut(keyTokens+t.ID, string(b))
}

// getToken reads a token record and its mod revision (nil if unknown).
func (s *Station) getToken(ctx context.Context, id string) (*tokenRecord, int64, error) {
	resp, err := s.cli.Get(ctx, keyTokens+id)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var t tokenRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &t); err != nil {
		return nil, 0, fmt.Errorf("token %s: %w", id, err)
	}
	return &t, resp.Kvs[0].ModRevision, nil
}

// checkToken finds the token of a bearer string ("ID.SECRET", a join
// token's ".CAHASH" ignored) and says why it is refused.
func (s *Station) checkToken(ctx context.Context, bearer string) (*tokenRecord, int64, error) {
	parts := strings.Split(bearer, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || len(parts[0]) > 64 {
		return nil, 0, &authError{"malformed token (want ID.SECRET, or ID.SECRET.CAHASH for a join token)"}
	}
	if strings.ContainsAny(parts[0], "/\x00") {
		return nil, 0, &authError{"malformed token ID"}
	}
	t, rev, err := s.getToken(ctx, parts[0])
	if err != nil {
		return nil, 0, err
	}
	// Compare against a hash even for unknown IDs so timing tells nothing.
	want := hashSecret("unknown")
	if t != nil {
		want = t.Hash
	}
	ok := subtle.ConstantTimeCompare([]byte(hashSecret(parts[1])), []byte(want)) == 1
	switch {
	case t == nil || !ok:
		return nil, 0, &authError{"unknown token"}
	case t.Revoked:
		return nil, 0, &authError{"token revoked"}
	case !t.Expires.IsZero() && time.Now().After(t.Expires):
		return nil, 0, &authError{"token expired at " + t.Expires.Format(time.RFC3339)}
	}
	return t, rev, nil
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// principal authenticates a request's bearer token.
func (s *Station) principal(r *http.Request) (*Principal, error) {
	b := bearer(r)
	if b == "" {
		return nil, &authError{"no token: send Authorization: Bearer TOKEN"}
	}
	t, _, err := s.checkToken(r.Context(), b)
	if err != nil {
		return nil, err
	}
	switch t.Kind {
	case kindJoin:
		return nil, &authError{"a join token only joins (POST " + api.RouteJoin + ")"}
	case kindMember:
		return &Principal{Name: t.Member, Role: t.Role, Member: true}, nil
	}
	return s.userPrincipal(r.Context(), t.User)
}

// userPrincipal is a user with the role and domains the current
// configuration gives them.
func (s *Station) userPrincipal(ctx context.Context, name string) (*Principal, error) {
	if name == "admin" {
		return &Principal{Name: name, Role: api.RoleAdmin}, nil
	}
	ci, err := s.cfgInfo(ctx)
	if err != nil {
		return nil, err
	}
	a, ok := ci.accounts[name]
	if !ok {
		return nil, &authError{fmt.Sprintf("user %q is not in the configuration's accounts", name)}
	}
	p := &Principal{Name: name, Role: a.Role}
	if a.Role == api.RoleWebmaster {
		p.Domains = append(p.Domains, a.Domains...)
		p.Domains = append(p.Domains, ci.webmasterOf[name]...)
		slices.Sort(p.Domains)
		p.Domains = slices.Compact(p.Domains)
	}
	return p, nil
}

// cfgInfo is what the station itself reads from a configuration.
type cfgInfo struct {
	version     int64
	accounts    map[string]clustercfg.Account
	webmasterOf map[string][]string // user -> domains naming them webmaster
	meta        []string
}

// cfgInfo reads accounts, domains' webmasters and meta of the current
// version (cached per version). It reads the stored canonical YAML
// directly, so it needs no more than the field names.
func (s *Station) cfgInfo(ctx context.Context) (cfgInfo, error) {
	v, _, err := s.readCurrent(ctx)
	if err != nil {
		return cfgInfo{}, err
	}
	s.cfgMu.Lock()
	c := s.cfgCache
	s.cfgMu.Unlock()
	if c.accounts != nil && c.version == v {
		return c, nil
	}
	cur, err := s.version(ctx, v)
	if err != nil {
		return cfgInfo{}, err
	}
	var doc struct {
		Accounts   []clustercfg.Account `yaml:"accounts"`
		Domains    []clustercfg.Domain  `yaml:"domains"`
		FileSystem struct {
			Meta []string `yaml:"meta"`
		} `yaml:"filesystem"`
	}
	// Unreadable (only possible with a foreign validator): no accounts.
	_ = yaml.Unmarshal([]byte(cur.YAML), &doc)
	c = cfgInfo{version: v, accounts: map[string]clustercfg.Account{}, webmasterOf: map[string][]string{}, meta: doc.FileSystem.Meta}
	for _, a := range doc.Accounts {
		c.accounts[a.Name] = a
	}
	for _, d := range doc.Domains {
		if d.Webmaster != "" {
			c.webmasterOf[d.Webmaster] = append(c.webmasterOf[d.Webmaster], d.Name)
		}
	}
	s.cfgMu.Lock()
	s.cfgCache = c
	s.cfgMu.Unlock()
	return c, nil
}

// auth wraps a handler: it authenticates the bearer token and checks
// that its principal has the permission, answering 401/403 otherwise.
func (s *Station) auth(need string, h func(w http.ResponseWriter, r *http.Request, p *Principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.principal(r)
		if err != nil {
			var ae *authError
			if errors.As(err, &ae) {
				s.met.authFailures.Inc()
			}
			s.fail(w, err)
			return
		}
		if err := allowed(p, need); err != nil {
			s.fail(w, err)
			return
		}
		h(w, r, p)
	}
}

// allowed says whether p may use a route needing need.
func allowed(p *Principal, need string) error {
	ok := false
	switch need {
	case permRead:
		ok = true
	case permAdmin:
		ok = !p.Member && p.Role == api.RoleAdmin
	case permMember:
		ok = p.Member
	case permWeb:
		ok = !p.Member && (p.Role == api.RoleAdmin || p.Role == api.RoleWebmaster)
	}
	if ok {
		return nil
	}
	who := "user " + p.Name
	if p.Member {
		who = "member " + p.Name
	}
	return &forbidden{fmt.Sprintf("%s (role %s) may not do this (needs %s)", who, p.Role, need)}
}

// bootstrapAdmin makes the admin token of DATA/admin.token on first
// start (or when the store no longer knows it).
func (s *Station) bootstrapAdmin(ctx context.Context) error {
	path := filepath.Join(s.opt.Data, "admin.token")
	if b, err := os.ReadFile(path); err == nil {
		if t, _, err := s.checkToken(ctx, strings.TrimSpace(string(b))); err == nil && t.Kind == kindBootstrap {
			return nil
		}
	}
	t, secret := newToken(kindBootstrap, api.RoleAdmin, "station "+s.name, 0)
	t.User = "admin"
	e := &api.AuditEntry{User: "station " + s.name, Action: "token-create", Detail: "bootstrap admin token " + t.ID}
	if err := s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		return nil, []clientv3.Op{tokenPut(t)}, nil
	}); err != nil {
		return fmt.Errorf("mgmt: bootstrap admin token: %w", err)
	}
	if err := writeFile0600(path, []byte(t.ID+"."+secret+"\n")); err != nil {
		return fmt.Errorf("mgmt: %w", err)
	}
	s.log.Info("bootstrap admin token written", "file", path)
	return nil
}

const loginTTL = 12 * time.Hour

// comparePassword is bcrypt's compare (tests count its calls).
var comparePassword = bcrypt.CompareHashAndPassword

var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.DefaultCost)
	return h
})

// login trades a password for an API token. The login guard admits it
// first (bounded concurrent checks; a locked-out user or source is
// refused without a compare); each lockout a failure starts goes to the
// audit log.
func (s *Station) login(ctx context.Context, req api.LoginRequest, src string) (api.LoginReply, error) {
	if req.User == "" || req.Password == "" {
		return api.LoginReply{}, &inputError{"login: give user and password"}
	}
	tk, reason, err := s.logins.admit(ctx, req.User, src)
	if err != nil {
		if reason != "" {
			s.met.loginRefused.WithLabelValues(reason).Inc()
		}
		return api.LoginReply{}, err
	}
	defer tk.release()
	fail := func(real bool) (api.LoginReply, error) {
		s.met.authFailures.Inc()
		locks := tk.failed(real)
		// The slot goes back before the audit's etcd write (up to 5 s):
		// a slow store must not hold the few password checks.
		tk.release()
		for _, l := range locks {
			kind := "user"
			if strings.HasPrefix(l.what, "source ") {
				kind = "source"
			}
			s.met.lockouts.WithLabelValues(kind).Inc()
			s.log.Warn("login lockout", "locked", l.what, "fails", l.fails, "for", l.d, "source", src)
			// Not the request's context: a client hanging up must not
			// keep the lockout out of the audit log.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := s.audit(actx, api.AuditEntry{User: "login from " + src, Action: "login-lockout",
				Detail: fmt.Sprintf("%s locked out for %v after %d failed logins", l.what, l.d, l.fails)}); err != nil {
				s.log.Error("audit of a login lockout", "err", err)
			}
			cancel()
		}
		return api.LoginReply{}, &authError{"bad user or password"}
	}
	if _, err := s.userPrincipal(ctx, req.User); err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			// As slow as a wrong password: timing does not tell who exists.
			comparePassword(dummyHash(), []byte(req.Password))
			return fail(false)
		}
		return api.LoginReply{}, err
	}
	resp, err := s.cli.Get(ctx, keyUsers+req.User)
	if err != nil {
		return api.LoginReply{}, err
	}
	var u userRecord
	hash := dummyHash() // a user without a password costs a bcrypt compare too
	if len(resp.Kvs) > 0 && json.Unmarshal(resp.Kvs[0].Value, &u) == nil {
		hash = []byte(u.Hash)
	}
	if comparePassword(hash, []byte(req.Password)) != nil || len(resp.Kvs) == 0 {
		return fail(true)
	}
	tk.succeeded()
	p, _ := s.userPrincipal(ctx, req.User)
	t, secret := newToken(kindAPI, p.Role, req.User, loginTTL)
	t.User = req.User
	if _, err := s.cli.Put(ctx, keyTokens+t.ID, mustJSON(t)); err != nil {
		return api.LoginReply{}, err
	}
	return api.LoginReply{Token: t.ID + "." + secret, Expires: t.Expires}, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// users is every account (the configuration's, and admin).
func (s *Station) users(ctx context.Context) ([]api.User, error) {
	ci, err := s.cfgInfo(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.User{{Name: "admin", Role: api.RoleAdmin}}
	for name := range ci.accounts {
		if name == "admin" {
			continue
		}
		p, err := s.userPrincipal(ctx, name)
		if err != nil {
			continue
		}
		out = append(out, api.User{Name: name, Role: p.Role, Domains: p.Domains})
	}
	slices.SortFunc(out, func(a, b api.User) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// setPassword sets a user's password; the user must be in the
// configuration's accounts (or be admin), and a role or domains given
// must be the configuration's.
func (s *Station) setPassword(ctx context.Context, req api.UserRequest, who string) error {
	if !keySegment(req.Name, 128) {
		return &inputError{fmt.Sprintf("user: bad name %q", req.Name)}
	}
	if len(req.Password) < 8 || len(req.Password) > 72 {
		return &inputError{"user: password must be 8 to 72 characters"}
	}
	p, err := s.userPrincipal(ctx, req.Name)
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			return &inputError{fmt.Sprintf("user %q is not in the configuration: add it under accounts: first (cfg apply), then set its password", req.Name)}
		}
		return err
	}
	if req.Role != "" && req.Role != p.Role {
		return &inputError{fmt.Sprintf("user %q has role %s in the configuration, not %s (roles and domains come from accounts:)", req.Name, p.Role, req.Role)}
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(req.Password), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	u := userRecord{Name: req.Name, Hash: string(hash), Changed: time.Now().UTC()}
	e := &api.AuditEntry{User: who, Action: "user-password", Detail: req.Name}
	return s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		return nil, []clientv3.Op{clientv3.OpPut(keyUsers+req.Name, mustJSON(u))}, nil
	})
}

// revokePage is how many tokens one transaction revokes: etcd refuses a
// transaction of more than 128 operations (its default), and the last
// one carries the user's deletion and its audit entry too.
const revokePage = 100

// userTokens is user's live API tokens and their mod revisions.
func (s *Station) userTokens(ctx context.Context, user string) ([]*tokenRecord, []int64, error) {
	resp, err := s.cli.Get(ctx, keyTokens, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, err
	}
	var toks []*tokenRecord
	var revs []int64
	for _, kv := range resp.Kvs {
		var t tokenRecord
		if json.Unmarshal(kv.Value, &t) == nil && t.User == user && t.Kind == kindAPI && !t.Revoked {
			toks = append(toks, &t)
			revs = append(revs, kv.ModRevision)
		}
	}
	return toks, revs, nil
}

// errMoreTokens: a user being deleted got more tokens than one
// transaction revokes (logins meanwhile); deleteUser pages again.
var errMoreTokens = errors.New("more tokens to revoke")

// deleteUser forgets a user's password and revokes all their API
// tokens: pages of revocations while more than a page is left, then one
// transaction with the rest, the password's deletion and the audit
// entry. Interrupted, it is finished by deleting the user again.
func (s *Station) deleteUser(ctx context.Context, name, who string) error {
	if !keySegment(name, 128) {
		return &inputError{fmt.Sprintf("user: bad name %q", name)}
	}
	revoked := 0
	for try := 0; ; try++ {
		n, err := s.revokePages(ctx, name)
		revoked += n
		if err != nil {
			return err
		}
		e := &api.AuditEntry{User: who, Action: "user-delete"}
		err = s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
			resp, err := s.cli.Get(ctx, keyUsers+name, clientv3.WithCountOnly())
			if err != nil {
				return nil, nil, err
			}
			toks, revs, err := s.userTokens(ctx, name)
			if err != nil {
				return nil, nil, err
			}
			if resp.Count == 0 && len(toks) == 0 && revoked == 0 {
				return nil, nil, &notFoundError{fmt.Sprintf("user %q has no password and no tokens: nothing to delete", name)}
			}
			if len(toks) > revokePage {
				return nil, nil, errMoreTokens
			}
			ops := []clientv3.Op{clientv3.OpDelete(keyUsers + name)}
			var cmps []clientv3.Cmp
			for i, t := range toks {
				t.Revoked = true
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keyTokens+t.ID), "=", revs[i]))
				ops = append(ops, tokenPut(t))
			}
			e.Detail = fmt.Sprintf("%s (%d tokens revoked)", name, revoked+len(toks))
			return cmps, ops, nil
		})
		if !errors.Is(err, errMoreTokens) || try == 10 {
			return err
		}
	}
}

// revokePages revokes user's live API tokens a page per transaction
// until at most a page is left; it returns how many it revoked.
func (s *Station) revokePages(ctx context.Context, user string) (int, error) {
	revoked := 0
	for {
		toks, revs, err := s.userTokens(ctx, user)
		if err != nil || len(toks) <= revokePage {
			return revoked, err
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for i, t := range toks[:revokePage] {
			t.Revoked = true
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keyTokens+t.ID), "=", revs[i]))
			ops = append(ops, tokenPut(t))
		}
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return revoked, err
		}
		// Not succeeded: a token changed meanwhile; read them again.
		if tr.Succeeded {
			revoked += len(ops)
		}
	}
}
