package mgmt

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

const accountsYAML = `accounts:
  - name: alice
    role: webmaster
    domains: [a.test]
  - name: rob
    role: read-only
  - name: ann
    role: admin
domains:
  - name: b.test
    service: web
    webmaster: alice
`

// login sets user's password (as admin) and logs in.
func login(t *testing.T, ts *tstation, user string) string {
	t.Helper()
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	if err := admin.Do(ctx, "POST", api.RouteUsers, api.UserRequest{User: api.User{Name: user}, Password: "pw-" + user + "-123"}, nil); err != nil {
		t.Fatalf("set %s's password: %v", user, err)
	}
	var lr api.LoginReply
	if err := ts.client(t, "").Do(ctx, "POST", api.RouteLogin, api.LoginRequest{User: user, Password: "pw-" + user + "-123"}, &lr); err != nil {
		t.Fatalf("login %s: %v", user, err)
	}
	if time.Until(lr.Expires) < 11*time.Hour {
		t.Fatalf("login token expires %v", lr.Expires)
	}
	return lr.Token
}

func TestAuthRoles(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.4", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)

	// No token, a malformed one, an unknown one: 401.
	for _, tok := range []string{"", "nodot", "abc.def", ts.admin + "x"} {
		err := ts.client(t, tok).Do(ctx, "GET", api.RouteConfig, nil, nil)
		if status(err) != 401 {
			t.Errorf("token %q: want 401, got %v", tok, err)
		}
	}
	// A password for someone not in the accounts is refused.
	err := admin.Do(ctx, "POST", api.RouteUsers, api.UserRequest{User: api.User{Name: "mallory"}, Password: "12345678"}, nil)
	if status(err) != 400 || !strings.Contains(err.Error(), "not in the configuration") {
		t.Fatalf("password for an unknown user: %v", err)
	}
	err = admin.Do(ctx, "POST", api.RouteUsers, api.UserRequest{User: api.User{Name: "rob", Role: "admin"}, Password: "12345678"}, nil)
	if status(err) != 400 {
		t.Fatalf("password with another role than the config's: %v", err)
	}

	web := ts.client(t, login(t, ts, "alice"))
	ro := ts.client(t, login(t, ts, "rob"))
	ann := ts.client(t, login(t, ts, "ann"))

	// Wrong password: 401.
	if err := ts.client(t, "").Do(ctx, "POST", api.RouteLogin, api.LoginRequest{User: "rob", Password: "nope-nope"}, nil); status(err) != 401 {
		t.Fatalf("bad password: %v", err)
	}
	// Everyone reads.
	for name, c := range map[string]*api.Client{"webmaster": web, "read-only": ro, "admin": ann} {
		var v api.Version
		if err := c.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 1 {
			t.Errorf("%s GET config: %v", name, err)
		}
	}
	// Only admins change the configuration, tokens, users.
	for name, c := range map[string]*api.Client{"webmaster": web, "read-only": ro} {
		if err := c.Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 1, YAML: "x: 1"}, nil); status(err) != 403 {
			t.Errorf("%s apply: want 403, got %v", name, err)
		}
		if err := c.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: "node"}, nil); status(err) != 403 {
			t.Errorf("%s token create: want 403, got %v", name, err)
		}
		if err := c.Do(ctx, "GET", api.RouteBackup, nil, nil); status(err) != 403 {
			t.Errorf("%s backup: want 403, got %v", name, err)
		}
	}
	if r := mustApply(t, ann, 1, accountsYAML+"# ann was here\n"); r.Version != 2 {
		t.Fatalf("admin ann apply: %+v", r)
	}
	// A webmaster's domains: their account's and the domains naming them.
	p, err := ts.s.userPrincipal(ctx, "alice")
	if err != nil || strings.Join(p.Domains, ",") != "a.test,b.test" || p.Role != api.RoleWebmaster {
		t.Fatalf("alice: %+v %v", p, err)
	}
	if err := allowed(p, permWeb); err != nil {
		t.Fatalf("webmaster on a web route: %v", err)
	}
	// Members are not users: a member credential may not apply.
	mem := join(t, ts, api.RoleNode, "n1")
	if err := ts.client(t, mem.Credential).Do(ctx, "PUT", api.RouteConfig, api.ApplyRequest{Base: 2, YAML: "x"}, nil); status(err) != 403 {
		t.Fatalf("member apply: %v", err)
	}
	// Users may not use member routes.
	if err := ann.Do(ctx, "GET", api.RouteDesired, nil, nil); status(err) != 403 {
		t.Fatalf("user on desired: %v", err)
	}
	// A user removed from the configuration loses access at once.
	mustApply(t, admin, 2, "accounts:\n  - name: ann\n    role: admin\n")
	if err := ro.Do(ctx, "GET", api.RouteConfig, nil, nil); status(err) != 401 {
		t.Fatalf("removed user: %v", err)
	}
	// Deleting a user revokes their tokens.
	if err := admin.Do(ctx, "DELETE", api.RouteUser+"ann", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := ann.Do(ctx, "GET", api.RouteConfig, nil, nil); status(err) != 401 {
		t.Fatalf("deleted user's token: %v", err)
	}
	// An admin-made API token for a user.
	var tok api.Token
	if err := admin.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: api.RoleAdmin, User: "admin", TTL: time.Hour}, &tok); err != nil || strings.Count(tok.Secret, ".") != 1 {
		t.Fatalf("api token: %+v %v", tok, err)
	}
	if err := ts.client(t, tok.Secret).Do(ctx, "GET", api.RouteTokens, nil, nil); err != nil {
		t.Fatalf("api token use: %v", err)
	}
}

func TestBodyLimit(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.5", t.TempDir()))
	c := ts.client(t, ts.admin)
	big := strings.Repeat("x", 2<<20)
	err := c.Do(ctxT(t), "POST", api.RouteRollback, map[string]string{"comment": big}, nil)
	if status(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB JSON: %v", err)
	}
	// A big configuration (10 MiB) is stored; a document over 16 MiB is
	// refused by validation (400), a body over twice that unread (413).
	if r := mustApply(t, c, 0, "# "+strings.Repeat("y", 10<<20)); r.Version != 1 {
		t.Fatalf("10 MiB apply: %+v", r)
	}
	err = c.Do(ctxT(t), "PUT", api.RouteConfig, api.ApplyRequest{Base: 1, YAML: "# " + strings.Repeat("z", 17<<20)}, nil)
	if status(err) != http.StatusBadRequest {
		t.Fatalf("17 MiB apply: %v", err)
	}
	err = c.Do(ctxT(t), "PUT", api.RouteConfig, api.ApplyRequest{Base: 1, YAML: strings.Repeat("z", 34<<20)}, nil)
	if status(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("34 MiB apply: %v", err)
	}
	err = c.Do(ctxT(t), "POST", api.RouteLogin, "not an object", nil)
	if status(err) != 400 {
		t.Fatalf("bad JSON: %v", err)
	}
}
