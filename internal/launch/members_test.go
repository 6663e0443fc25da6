package launch_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// soloMembers is a corral binary for testing launch's handling of metadata
// members whatever `corral meta` supports: a script that drops --id and
// --peers, so each member runs as a metadata server of its own.
func soloMembers(t *testing.T) string {
	bin := pfstest.Binary(t)
	p := filepath.Join(t.TempDir(), "corral")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = meta ]; then
  shift; set -- meta "$@"; out=""
  for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$a" in --id|--peers) skip=1;; *) out="$out '$a'";; esac
  done
  eval "set -- $out"
fi
exec %q "$@"
`, bin)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMembersLaunched: three members get IDs 1..3, the same --peers, each
// its own data directory holding the one cluster secret; iods get the whole
// list; a member that dies is restarted on its address with its ID.
func TestMembersLaunched(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	data := t.TempDir()
	fsys, err := launch.StartFS(context.Background(), soloMembers(t), data, "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0",
		[]string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c := &launch.Cluster{FS: fsys}
	t.Cleanup(c.Stop)
	if len(fsys.Metas) != 3 || fsys.Meta != fsys.Metas[0] {
		t.Fatalf("%d members, Meta %v", len(fsys.Metas), fsys.Meta)
	}
	var addrs, peers []string
	for i, p := range fsys.Metas {
		addrs = append(addrs, p.Addr)
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, p.Addr))
	}
	if fsys.MetaAddr() != strings.Join(addrs, ",") {
		t.Errorf("MetaAddr %s, members %v", fsys.MetaAddr(), addrs)
	}
	secret, err := os.ReadFile(fsys.SecretFile)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range fsys.Metas {
		id := fmt.Sprint(i + 1)
		dir := filepath.Join(data, "meta", id)
		want := []string{"meta", "--id", id, "--peers", strings.Join(peers, ","), "--listen", p.Addr, "--data", dir}
		if p.Name != "meta"+id || !slices.Equal(p.Args, want) {
			t.Errorf("member %s: %v, want %v", p.Name, p.Args, want)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cluster.secret")); err != nil || !bytes.Equal(b, secret) {
			t.Errorf("member %s's secret: %v (the cluster's: %v)", id, err, bytes.Equal(b, secret))
		}
	}
	if i := slices.Index(fsys.IODs[0].Args, "--meta"); i < 0 || fsys.IODs[0].Args[i+1] != fsys.MetaAddr() {
		t.Errorf("iod args %v lack --meta %s", fsys.IODs[0].Args, fsys.MetaAddr())
	}

	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan launch.Event, 100)
	done := make(chan struct{})
	go func() {
		c.Supervise(ctx, launch.Backoff{Min: 100 * time.Millisecond, Max: time.Second, Reset: time.Minute},
			func(e launch.Event) { events <- e })
		close(done)
	}()
	old := c.Proc("meta2")
	old.Kill()
	for _, want := range []string{"died", "restarted"} {
		select {
		case e := <-events:
			if e.Role != "meta2" || e.Kind != want {
				t.Fatalf("event %v, want meta2 %s", e, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no meta2 %s event within 30 s", want)
		}
	}
	if p := c.Proc("meta2"); p == old || p.Addr != old.Addr || !slices.Equal(p.Args, old.Args) {
		t.Errorf("meta2 restarted as %v on %s, was %v on %s", p.Args, p.Addr, old.Args, old.Addr)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Supervise did not return within 30 s of the cancel")
	}
}
