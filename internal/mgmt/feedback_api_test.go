package mgmt

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestFeedbackAPI: GET /v1/feedback is /v1 like the rest (no token: 401);
// with no feedback section a look is 404 saying so, and a member's long
// poll ends with 204 after its wait.
func TestFeedbackAPI(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.71.2", t.TempDir()))
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, "services:\n  - name: www\n    vip: 127.0.71.100:8000\n    servers:\n      - address: 127.0.71.11:8080\n")
	if err := ts.client(t, "").Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, nil); status(err) != http.StatusUnauthorized {
		t.Fatalf("no token: %v, want 401", err)
	}
	err := admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, nil)
	if status(err) != http.StatusNotFound {
		t.Fatalf("no section: %v, want 404", err)
	}
	t.Logf("no section: %v", err)
	jr := join(t, ts, api.RoleDirector, "d1")
	member := ts.client(t, jr.Credential)
	start := time.Now()
	buf := &limitedBody{}
	if err := member.Do(ctxT(t), http.MethodGet, api.RouteFeedback+"?after=0&wait=300ms", nil, buf); err != nil || buf.n != 0 {
		t.Fatalf("member long poll: %v, %d bytes: want 204", err, buf.n)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("long poll answered after %v: want the wait", took)
	}
	if err := member.Do(ctxT(t), http.MethodGet, api.RouteFeedback+"?after=x", nil, nil); status(err) != http.StatusBadRequest {
		t.Fatalf("after=x: %v, want 400", err)
	}

	// A section whose secrets file is missing on the station: the look
	// says which file, and of which version.
	mustApply(t, admin, 1, "services:\n  - name: www\n    vip: 127.0.71.100:8000\n    weights: feedback\n    servers:\n      - address: 127.0.71.11:8080\nfeedback:\n  community-file: /nonexistent/community\n")
	if !waitCond(10*time.Second, func() bool {
		err = admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, nil)
		return status(err) == http.StatusNotFound && strings.Contains(err.Error(), "/nonexistent/community") && strings.Contains(err.Error(), "version 2")
	}) {
		t.Fatalf("missing secrets file: %v", err)
	}
	t.Logf("missing secrets file: %v", err)
}

type limitedBody struct{ n int }

func (b *limitedBody) Write(p []byte) (int, error) { b.n += len(p); return len(p), nil }
