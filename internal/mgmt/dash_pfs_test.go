package mgmt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// The station's probe reads a real file system: its I/O servers with
// space and state, and its metadata member as leader.
func TestDashPFSProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a file system (builds the corral binary)")
	}
	fsys := pfstest.Start(t, 2)
	p := &pfsProbe{secret: fsys.Cred.Marshal()}
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ { // the iods register within a few seconds
		srv, mm, e := p.status(ctx, []string{fsys.Meta.Addr})
		if e == nil && len(srv) == 2 && srv[0].State == "up" && srv[1].State == "up" {
			if srv[0].Total <= 0 || srv[0].Free <= 0 || srv[0].Free > srv[0].Total {
				t.Fatalf("space: %+v", srv[0])
			}
			if len(mm) != 1 || !mm[0].Leader || !mm[0].Up {
				t.Fatalf("meta: %+v", mm)
			}
			break
		}
		if i == 99 {
			t.Fatalf("after 10 s: servers %+v, meta %+v, err %v", srv, mm, e)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A member nobody answers at: an error naming it, the member shown
	// down with the reason, within the probe's timeout.
	start := time.Now()
	srv, mm, err := p.status(ctx, []string{"127.0.55.9:1"})
	if err == nil || len(srv) != 0 || len(mm) != 1 || mm[0].Up || mm[0].Error == "" || time.Since(start) > 15*time.Second {
		t.Fatalf("unreachable meta: %v %+v %+v after %v", err, srv, mm, time.Since(start))
	}

	// Without the secret, or with a wrong one, it says why.
	if _, _, err := (&pfsProbe{}).status(ctx, []string{fsys.Meta.Addr}); err == nil || !strings.Contains(err.Error(), "no cluster secret") {
		t.Fatalf("no secret: %v", err)
	}
	if _, _, err := (&pfsProbe{secret: []byte("nonsense")}).status(ctx, []string{fsys.Meta.Addr}); err == nil || !strings.Contains(err.Error(), "cluster secret") {
		t.Fatalf("bad secret: %v", err)
	}
}
