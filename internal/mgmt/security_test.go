package mgmt

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// Two (or more) joins at once with one single-use token: exactly one
// wins, the others are told the token is used, and only one credential
// exists.
func TestJoinSingleUseRace(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.10", t.TempDir()))
	ctx := ctxT(t)
	for round := 0; round < 3; round++ {
		once := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, SingleUse: true})
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var jr api.JoinReply
				errs[i] = ts.client(t, once.Secret).Do(ctx, "POST", api.RouteJoin,
					api.JoinRequest{Role: api.RoleNode, Name: "race" + itoa(int64(round*n+i))}, &jr)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case status(err) == 401 && strings.Contains(err.Error(), "token already used"):
			default:
				t.Errorf("round %d join %d: want ok or 401 token already used, got %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d joins won with one single-use token, want 1", round, won)
		}
	}
	var toks []api.Token
	if err := ts.client(t, ts.admin).Do(ctx, "GET", api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	creds := 0
	for _, tk := range toks {
		if strings.HasPrefix(tk.User, "race") {
			creds++
		}
	}
	if creds != 3 {
		t.Fatalf("%d member credentials after 3 single-use tokens, want 3", creds)
	}
}

// Every route that changes something refuses a member credential, a
// read-only user and a webmaster; member routes refuse users; a join
// token is good for nothing but join.
func TestRoutePermissions(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.61.11", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, accountsYAML)
	mem := join(t, ts, api.RoleDirector, "d1")
	joinTok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	who := map[string]string{
		"member":    mem.Credential,
		"read-only": login(t, ts, "rob"),
		"webmaster": login(t, ts, "alice"),
	}
	adminRoutes := []struct{ method, path string }{
		{"PUT", api.RouteConfig}, {"POST", api.RouteRollback}, {"POST", api.RouteTx},
		{"GET", api.RouteBackup}, {"POST", api.RouteUsers}, {"DELETE", api.RouteUser + "rob"},
		{"GET", api.RouteTokens}, {"POST", api.RouteTokens}, {"DELETE", api.RouteToken + "abc"},
		{"POST", api.RouteDrain},
	}
	for name, tok := range who {
		for _, r := range adminRoutes {
			err := ts.client(t, tok).Do(ctx, r.method, r.path, map[string]any{}, nil)
			if status(err) != http.StatusForbidden {
				t.Errorf("%s %s %s: want 403, got %v", name, r.method, r.path, err)
			}
		}
	}
	for _, name := range []string{"read-only", "webmaster"} {
		for _, r := range []struct{ method, path string }{{"GET", api.RouteDesired}, {"POST", api.RouteReport}} {
			err := ts.client(t, who[name]).Do(ctx, r.method, r.path, api.MemberStatus{Name: "d1"}, nil)
			if status(err) != http.StatusForbidden {
				t.Errorf("%s %s %s: want 403, got %v", name, r.method, r.path, err)
			}
		}
	}
	for _, r := range append(adminRoutes, struct{ method, path string }{"GET", api.RouteConfig}, struct{ method, path string }{"GET", api.RouteDesired}) {
		err := ts.client(t, joinTok.Secret).Do(ctx, r.method, r.path, map[string]any{}, nil)
		if status(err) != http.StatusUnauthorized {
			t.Errorf("join token on %s %s: want 401, got %v", r.method, r.path, err)
		}
	}
}
