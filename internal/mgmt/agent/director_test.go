package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/director"
)

// backend says its name on each connection, then echoes lines.
func backend(t *testing.T, addr, name string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s\n", name)
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// viewStandIn cuts a director's view the simple way while
// clustercfg.DirectorView is not built: every service over its cluster's
// nodes, drained ones at weight 0, no checks.
func viewStandIn(c *clustercfg.Config, drained []string) (*config.Director, error) {
	var b strings.Builder
	for _, s := range c.Services {
		fmt.Fprintf(&b, "service %s {\n vip %s\n scheduler %s\n check none\n", s.Name, s.VIP, s.Scheduler)
		for _, n := range c.Nodes {
			if n.Cluster == s.Cluster {
				w := 1
				if n.Weight != nil {
					w = *n.Weight
				}
				if slices.Contains(drained, n.Name) {
					w = 0
				}
				fmt.Fprintf(&b, " server %s weight=%d\n", n.Address, w)
			}
		}
		b.WriteString("}\n")
	}
	return config.Parse("view", []byte(b.String()))
}

func dial(t *testing.T, vip string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", vip, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("through the VIP: %v", err)
	}
	return c, r, strings.TrimSpace(name)
}

func echo(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	fmt.Fprintf(c, "%s\n", msg)
	got, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
}

// A director applies versions from the station through the agent: a new
// version (a node drained, the scheduler changed) takes effect for new
// connections while an open one keeps working; a version the director
// refuses is reported and changes nothing.
func TestDirectorViaAgent(t *testing.T) {
	fast(t)
	n1 := backend(t, "127.0.54.21:0", "n1")
	n2 := backend(t, "127.0.54.22:0", "n2")
	vl, err := net.Listen("tcp", "127.0.54.10:0")
	if err != nil {
		t.Fatal(err)
	}
	vip := vl.Addr().String()
	vl.Close()
	d := director.New(nil)
	t.Cleanup(d.Close)
	_, viewErr := clustercfg.DirectorView(&clustercfg.Config{}, "d1", nil)
	realView := viewErr == nil || !strings.Contains(viewErr.Error(), "not built")
	apply := func(_ context.Context, c *clustercfg.Config, v int64, drained []string) error {
		if realView {
			return d.ApplyCluster(c, v, "d1", drained, nil)
		}
		view, err := viewStandIn(c, drained)
		if err != nil {
			return err
		}
		return d.ApplyView(view, fmt.Sprintf("station version %d", v))
	}
	yaml := func(sched string) string {
		return fmt.Sprintf(`clusters:
  - name: web
nodes:
  - name: n1
    address: %s
    cluster: web
  - name: n2
    address: %s
    cluster: web
directors:
  - name: d1
services:
  - name: www
    cluster: web
    vip: %s
    scheduler: %s
    check:
      type: none
`, n1, n2, vip, sched)
	}
	f := newFakeStation(t, "127.0.54.6")
	f.set(1, yaml("rr"))
	o := Options{Stations: []string{f.url()}, Token: f.token("t1", ""), State: t.TempDir(), Role: "director", Name: "d1",
		Apply: apply, Report: func() any { return d.Status() }}
	a, _, err := Join(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a)
	waitFor(t, "version 1", reported(f, 1, ""))
	st, _ := f.lastReport()
	if !strings.Contains(string(st.Report), `"name":"www"`) || !strings.Contains(string(st.Report), `"scheduler":"rr"`) {
		t.Fatalf("report is not the director's status: %s", st.Report)
	}
	// One connection to each node, open across the changes.
	open := map[string]net.Conn{}
	readers := map[string]*bufio.Reader{}
	for range 4 {
		c, r, name := dial(t, vip)
		if open[name] != nil {
			c.Close()
			continue
		}
		open[name], readers[name] = c, r
		defer c.Close()
	}
	if open["n1"] == nil || open["n2"] == nil {
		t.Fatalf("rr over two nodes reached only %v", open)
	}
	f.set(2, yaml("wlc"), "n1")
	waitFor(t, "version 2", reported(f, 2, ""))
	for i := range 3 {
		c, _, name := dial(t, vip)
		c.Close()
		if name != "n2" {
			t.Fatalf("new connection %d after draining n1 went to %s", i, name)
		}
	}
	echo(t, open["n1"], readers["n1"], "still here")
	echo(t, open["n2"], readers["n2"], "still here")
	if s := d.Status(); len(s) != 1 || s[0].Scheduler != "wlc" {
		t.Fatalf("director status after version 2: %+v", s)
	}
	if rs := d.ReloadStatus(); rs == nil || !rs.OK || rs.File != "station version 2" {
		t.Fatalf("reload status: %+v", rs)
	}
	// A scheduler the director does not know: refused, version 2 stays.
	f.set(3, yaml("nope"), "n1")
	waitFor(t, "version 3 refused", func() bool {
		st, ok := f.lastReport()
		return ok && st.Version == 2 && strings.Contains(st.Error, "nope")
	})
	echo(t, open["n1"], readers["n1"], "after a refused version")
	if s := d.Status(); s[0].Scheduler != "wlc" {
		t.Fatalf("scheduler %s after a refused version", s[0].Scheduler)
	}
}
