package mgmt

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func mkToken(t *testing.T, ts *tstation, req api.TokenRequest) api.Token {
	t.Helper()
	var tok api.Token
	if err := ts.client(t, ts.admin).Do(ctxT(t), "POST", api.RouteTokens, req, &tok); err != nil {
		t.Fatalf("token create %+v: %v", req, err)
	}
	return tok
}

// join makes a join token for role and joins as name.
func join(t *testing.T, ts *tstation, role, name string) api.JoinReply {
	t.Helper()
	tok := mkToken(t, ts, api.TokenRequest{Role: role, TTL: time.Hour})
	var jr api.JoinReply
	if err := ts.client(t, tok.Secret).Do(ctxT(t), "POST", api.RouteJoin, api.JoinRequest{Role: role, Name: name, Addr: "127.0.0.1:80"}, &jr); err != nil {
		t.Fatalf("join %s %s: %v", role, name, err)
	}
	return jr
}

// TestJoinTokenSingleUseDefault: a join token made without saying how
// often it may be used opens one join; a second join with it (a token
// copied from a shell history, a log) is refused.
func TestJoinTokenSingleUseDefault(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.7", t.TempDir()))
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	if !tok.SingleUse {
		t.Errorf("a join token without multi_use is listed as multi-use: %+v", tok)
	}
	do := func(name string) error {
		return ts.client(t, tok.Secret).Do(ctxT(t), "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleNode, Name: name}, nil)
	}
	if err := do("n1"); err != nil {
		t.Fatal(err)
	}
	if err := do("n2"); status(err) != 401 || !strings.Contains(err.Error(), "token already used") {
		t.Fatalf("second join with a default token: want 401 token already used, got %v", err)
	}
	err := ts.client(t, ts.admin).Do(ctxT(t), "POST", api.RouteTokens, map[string]any{"role": "node", "ttl": int64(time.Hour), "single_use": true, "multi_use": true}, nil)
	if status(err) != 400 || !strings.Contains(err.Error(), "multi_use") {
		t.Fatalf("single_use and multi_use together: want 400 naming them, got %v", err)
	}
}

func TestJoinTokens(t *testing.T) {
	opt := stationOpts("127.0.52.6", t.TempDir())
	secret, _ := proto.NewSecret()
	opt.Secret = secret.Marshal()
	ts := startStation(t, opt)
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "filesystem:\n  meta: [127.0.0.1:9000]\n")

	tryJoin := func(tok, role, name string) (api.JoinReply, error) {
		var jr api.JoinReply
		err := ts.client(t, tok).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: role, Name: name}, &jr)
		return jr, err
	}
	wantRefused := func(what string, err error, reason string) {
		t.Helper()
		if status(err) != 401 || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: want 401 %q, got %v", what, reason, err)
		}
	}

	// A good token works; the token string pins the CA.
	good := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, MultiUse: true})
	if p := strings.Split(good.Secret, "."); len(p) != 3 || p[2] != CAHash(ts.s.CA()) || len(p[2]) != 32 {
		t.Fatalf("join token %q: want ID.SECRET.CAHASH", good.Secret)
	}
	jr, err := tryJoin(good.Secret, api.RoleNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if jr.Member != "n1" || jr.Credential == "" || CAHash([]byte(jr.CA)) != CAHash(ts.s.CA()) || len(jr.Stations) != 1 || jr.Stations[0] != ts.url {
		t.Fatalf("join reply: %+v", jr)
	}
	if strings.Join(jr.Meta, ",") != "127.0.0.1:9000" {
		t.Fatalf("join meta: %v", jr.Meta)
	}
	// A node gets the read-only credential, meta the full secret.
	c, err := proto.ParseCredential(jr.Secret)
	if err != nil || c.Kind() != proto.KindReadOnly {
		t.Fatalf("node's fs credential: %v %v", c, err)
	}
	mj := join(t, ts, api.RoleMeta, "m1")
	if c, err := proto.ParseCredential(mj.Secret); err != nil || c.Kind() != proto.KindFull {
		t.Fatalf("meta's fs credential: %v", err)
	}
	// A multi-use token works again.
	if _, err := tryJoin(good.Secret, api.RoleNode, "n2"); err != nil {
		t.Fatalf("second use of a multi-use token: %v", err)
	}

	// Role mismatch: 403.
	if _, err := tryJoin(good.Secret, api.RoleIOD, "i1"); status(err) != 403 {
		t.Errorf("join as another role: %v", err)
	}
	// Single-use (asked for explicitly), used.
	once := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, SingleUse: true})
	if _, err := tryJoin(once.Secret, api.RoleNode, "n3"); err != nil {
		t.Fatal(err)
	}
	_, err = tryJoin(once.Secret, api.RoleNode, "n4")
	wantRefused("used single-use token", err, "token already used")
	// Expired.
	exp := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Millisecond})
	time.Sleep(20 * time.Millisecond)
	_, err = tryJoin(exp.Secret, api.RoleNode, "n5")
	wantRefused("expired token", err, "token expired at ")
	// Revoked.
	rev := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour})
	if err := admin.Do(ctx, "DELETE", api.RouteToken+rev.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = tryJoin(rev.Secret, api.RoleNode, "n6")
	wantRefused("revoked token", err, "token revoked")
	// Unknown, and a known ID with a wrong secret.
	_, err = tryJoin("0123456789abcdef.00.00", api.RoleNode, "n7")
	wantRefused("unknown token", err, "unknown token")
	_, err = tryJoin(good.ID+".ffff", api.RoleNode, "n7")
	wantRefused("wrong secret", err, "unknown token")
	// A member credential is not a join token.
	_, err = tryJoin(jr.Credential, api.RoleNode, "n8")
	wantRefused("credential as join token", err, "not a join token")
	if err := admin.Do(ctx, "DELETE", api.RouteToken+"nosuch", nil, nil); status(err) != 404 {
		t.Errorf("revoke unknown: %v", err)
	}

	// The credential reports and long-polls; under another name: 403.
	mc := ts.client(t, jr.Credential)
	if err := mc.Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: "n1", Role: "node", Healthy: true, Metrics: "http://127.0.0.1:9080/metrics"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := mc.Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: "n2", Role: "node"}, nil); status(err) != 403 {
		t.Fatalf("report under another name: %v", err)
	}
	var ms []api.MemberStatus
	if err := admin.Do(ctx, "GET", api.RouteMembers, nil, &ms); err != nil || len(ms) != 1 || !ms[0].Up || ms[0].Seen.IsZero() {
		t.Fatalf("members: %+v %v", ms, err)
	}
	var sd []api.SDTarget
	if err := admin.Do(ctx, "GET", api.RouteSD, nil, &sd); err != nil || len(sd) != 2 {
		t.Fatalf("sd: %+v %v", sd, err)
	}
	if sd[0].Targets[0] != "127.0.0.1:9080" || sd[0].Labels["role"] != "node" || sd[0].Labels["member"] != "n1" || sd[1].Labels["__scheme__"] != "https" {
		t.Fatalf("sd: %+v", sd)
	}
	var d api.Desired
	if err := mc.Do(ctx, "GET", api.RouteDesired, nil, &d); err != nil || d.Version != 1 || d.Rev == 0 {
		t.Fatalf("desired: %+v %v", d, err)
	}
	// Rejoining under the same name revokes the old credential.
	join(t, ts, api.RoleNode, "n1")
	if err := mc.Do(ctx, "GET", api.RouteDesired, nil, nil); status(err) != 401 || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("old credential after rejoin: %v", err)
	}
	// A revoked credential is refused.
	j9 := join(t, ts, api.RoleDirector, "d1")
	var toks []api.Token
	if err := admin.Do(ctx, "GET", api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	var credID string
	for _, tk := range toks {
		if tk.User == "d1" && tk.Role == api.RoleDirector && !tk.Revoked {
			credID = tk.ID
		}
		if tk.Secret != "" {
			t.Fatalf("token list shows a secret: %+v", tk)
		}
	}
	if credID == "" || !strings.HasPrefix(j9.Credential, credID+".") {
		t.Fatalf("d1's credential not listed: %+v", toks)
	}
	if err := admin.Do(ctx, "DELETE", api.RouteToken+credID, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := ts.client(t, j9.Credential).Do(ctx, "GET", api.RouteDesired, nil, nil); status(err) != 401 {
		t.Fatalf("revoked credential: %v", err)
	}
}

func TestDesiredLongPollWakes(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.7", t.TempDir()))
	ctx := ctxT(t)
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "v: 1")
	mc := ts.client(t, join(t, ts, api.RoleNode, "n1").Credential)
	var d api.Desired
	if err := mc.Do(ctx, "GET", api.RouteDesired, nil, &d); err != nil || d.Version != 1 {
		t.Fatalf("desired: %+v %v", d, err)
	}
	// A poll with nothing new waits out its wait and answers the same Rev.
	var same api.Desired
	start := time.Now()
	if err := mc.Do(ctx, "GET", api.RouteDesired+"?after="+itoa(d.Rev)+"&wait=300ms", nil, &same); err != nil || same.Rev != d.Rev {
		t.Fatalf("idle poll: %+v %v", same, err)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("idle poll answered before its wait")
	}
	// Member reports do not wake polls; an apply does, at once.
	poll := func(after int64) chan api.Desired {
		ch := make(chan api.Desired, 1)
		go func() {
			var nd api.Desired
			if err := mc.Do(ctx, "GET", api.RouteDesired+"?after="+itoa(after)+"&wait=30s", nil, &nd); err != nil {
				t.Error(err)
			}
			ch <- nd
		}()
		return ch
	}
	ch := poll(d.Rev)
	time.Sleep(100 * time.Millisecond)
	mc.Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: "n1"}, nil)
	select {
	case nd := <-ch:
		t.Fatalf("a report woke the poll: %+v", nd)
	case <-time.After(300 * time.Millisecond):
	}
	applied := time.Now()
	mustApply(t, admin, 1, "v: 2")
	select {
	case nd := <-ch:
		t.Logf("poll answered %v after the apply was sent", time.Since(applied))
		if nd.Version != 2 || nd.YAML != "v: 2\n" || nd.Rev <= d.Rev {
			t.Fatalf("woken poll: %+v", nd)
		}
		d = nd
	case <-time.After(10 * time.Second):
		t.Fatal("apply did not wake the long poll")
	}
	// Drain, undrain and a binary order wake it too.
	ch = poll(d.Rev)
	if err := ts.s.setDrain(ctx, "n2", true, "admin"); err != nil {
		t.Fatal(err)
	}
	nd := <-ch
	if strings.Join(nd.Drained, ",") != "n2" {
		t.Fatalf("drain: %+v", nd)
	}
	ch = poll(nd.Rev)
	ts.s.setDrain(ctx, "n2", false, "admin")
	if nd = <-ch; len(nd.Drained) != 0 {
		t.Fatalf("undrain: %+v", nd)
	}
	ch = poll(nd.Rev)
	ts.s.setBinary(ctx, "n1", &api.BinaryOrder{SHA256: "abc", Rollout: "r1"})
	if nd = <-ch; nd.Binary == nil || nd.Binary.SHA256 != "abc" {
		t.Fatalf("binary: %+v", nd)
	}
	ch = poll(nd.Rev)
	ts.s.setBinary(ctx, "n1", nil)
	if nd = <-ch; nd.Binary != nil {
		t.Fatalf("binary cleared: %+v", nd)
	}
	// Another member's binary order does not concern n1.
	if dr, _ := ts.s.drained(ctx); len(dr) != 0 {
		t.Fatalf("drained: %v", dr)
	}
	// A poll from a future revision (a restored station) answers at once.
	var fut api.Desired
	if err := mc.Do(ctx, "GET", api.RouteDesired+"?after=99999999&wait=30s", nil, &fut); err != nil || fut.Version != 2 {
		t.Fatalf("future rev: %+v %v", fut, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestEventsSubscribe(t *testing.T) {
	s := &Station{subs: map[chan api.Event]struct{}{}, log: discardLog()}
	c, cancel := s.subscribe()
	slow, _ := s.subscribe()
	for i := 0; i < 300; i++ {
		s.event(api.Event{Kind: "x", Msg: "m"})
		<-c
	}
	// The one that never read was dropped (closed), not waited for.
	n := 0
	for range slow {
		n++
	}
	if n != 64 {
		t.Fatalf("slow subscriber got %d before being dropped", n)
	}
	if ev := s.recentEvents(0); len(ev) != maxEvents {
		t.Fatalf("ring holds %d", len(ev))
	}
	cancel()
	cancel()
	_ = context.Background()
}

func TestMemberUpDown(t *testing.T) {
	opt := stationOpts("127.0.52.13", t.TempDir())
	opt.MemberTimeout = 1500 * time.Millisecond
	ts := startStation(t, opt)
	ctx := ctxT(t)
	mc := ts.client(t, join(t, ts, api.RoleNode, "n1").Credential)
	if err := mc.Do(ctx, "POST", api.RouteReport, api.MemberStatus{Name: "n1"}, nil); err != nil {
		t.Fatal(err)
	}
	evs, cancel := ts.s.subscribe()
	defer cancel()
	var ms []api.MemberStatus
	ts.client(t, ts.admin).Do(ctx, "GET", api.RouteMembers, nil, &ms)
	if len(ms) != 1 || !ms[0].Up || ms[0].Role != "node" {
		t.Fatalf("members: %+v", ms)
	}
	// Silent past the timeout: down, with an event.
	deadline := time.After(15 * time.Second)
	for {
		select {
		case e := <-evs:
			if e.Kind == "member-down" && e.Member == "n1" {
				ts.client(t, ts.admin).Do(ctx, "GET", api.RouteMembers, nil, &ms)
				if ms[0].Up {
					t.Fatal("member-down event but members says up")
				}
				return
			}
		case <-deadline:
			t.Fatal("no member-down event")
		}
	}
}

// A node join token may name a logical cluster: a new node joining with
// it enters that cluster (a new version adding it at its address); a
// replaced machine (a node already in the configuration) changes nothing;
// a cluster the configuration lacks is refused when the token is made.
func TestJoinEntersCluster(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.52.40", t.TempDir()))
	ctx := ctxT(t)
	adm := ts.client(t, ts.admin)
	base := "clusters:\n  - name: web\nnodes:\n  - name: n1\n    address: 127.0.0.21:8080\n    cluster: web\n"
	mustApply(t, adm, 0, base)
	if err := adm.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: api.RoleNode, Cluster: "nope"}, nil); status(err) != 400 || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("token for a cluster not configured: %v", err)
	}
	if err := adm.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: api.RoleIOD, Cluster: "web"}, nil); status(err) != 400 {
		t.Fatalf("iod token with a cluster: %v", err)
	}
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, Cluster: "web", MultiUse: true})
	if tok.Cluster != "web" {
		t.Fatalf("token: %+v", tok)
	}
	joinAs := func(name, addr string) {
		t.Helper()
		if err := ts.client(t, tok.Secret).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: api.RoleNode, Name: name, Addr: addr}, nil); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
	}
	// A replaced machine: n1 is configured already.
	joinAs("n1", "127.0.0.21:8080")
	var v api.Version
	if err := adm.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 1 {
		t.Fatalf("after n1 rejoined: version %d (%v), want 1", v.Version, err)
	}
	// A new machine enters the cluster.
	joinAs("n9", "127.0.0.29:8080")
	if err := adm.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 2 {
		t.Fatalf("after n9 joined: version %d (%v), want 2", v.Version, err)
	}
	// (This package's tests swap the transaction ops for a line each.)
	for _, want := range []string{`"name":"n9"`, `"address":"127.0.0.29:8080"`, `"cluster":"web"`, "put node"} {
		if !strings.Contains(v.YAML, want) {
			t.Errorf("version 2 lacks %s:\n%s", want, v.YAML)
		}
	}
	if !strings.Contains(v.Author, "join token "+tok.ID) {
		t.Errorf("version 2's author %q, want the join token", v.Author)
	}
}
