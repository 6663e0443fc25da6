package mgmt

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// clusterNet is the loopback /24 of TestDashChromiumCluster's corral up.
const clusterNet = "127.0.66"

// TestDashChromiumCluster is the dashboard against a real cluster: `corral
// up` (station, meta, an iod, two nodes, a director, all joined), the page
// in headless Chromium checked against /v1/status while the cluster is
// idle, then node2 drained from the page: the director applies it (its
// report, which the pool on the page shows, has node2 at weight 0) and
// requests through the VIP go on.
func TestDashChromiumCluster(t *testing.T) {
	lab.Need(t, lab.Chromium)
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	bin := pfstest.Binary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "d")
	up := exec.Command(bin, "up", "--net", clusterNet+".0/24", "--data", data, "--meta-members", "1", "--iods", "1", "--nodes", "2")
	up.Dir = dir
	up.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, ".config")) // not the user's client configuration
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	up.Stderr = io.Discard
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		up.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { up.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			up.Process.Kill()
			<-done
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && strings.HasPrefix(sc.Text(), "corral is up") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("corral up ended before it was up; logs in %s/logs", data)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("corral up not up within 90 s; logs in %s/logs", data)
	}

	base := "https://" + clusterNet + ".1:7600"
	tok, err := os.ReadFile(filepath.Join(data, "mgmt", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClientCAFile([]string{base}, strings.TrimSpace(string(tok)), filepath.Join(data, "mgmt", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	status := func() dashStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var st dashStatus
		if err := cl.Do(ctx, http.MethodGet, api.RouteStatus, nil, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Every member up and on version 1, the director reporting both nodes.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := status()
		n := 0
		for _, m := range st.Members {
			if m.Up && m.Version == st.Version {
				n++
			}
		}
		pool := 0
		for _, c := range st.Clusters {
			for _, s := range c.Services {
				if s.Name == "www" {
					pool = len(s.Servers)
				}
			}
		}
		if n == 5 && pool == 2 && len(st.Servers) == 1 && len(st.Meta) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not reported whole within 60 s: %d members current, pool %d: %+v", n, pool, st.Members)
		}
		time.Sleep(200 * time.Millisecond)
	}

	ctx := openDashboard(t, base, dashLogin{Token: strings.TrimSpace(string(tok))})
	waitPage(t, ctx, "a third overview", `window.corralDash.updates >= 3`)
	// The cluster is idle, so page and API agree; an overview taken
	// between the two reads can still differ (a member's report time):
	// compare again on the next update before calling it a mismatch.
	var cmpErr string
	for try := 0; try < 5; try++ {
		probe := &recorder{TB: t}
		comparePage(probe, readPage(t, ctx), status())
		if cmpErr = probe.msgs(); cmpErr == "" {
			break
		}
		time.Sleep(1100 * time.Millisecond)
	}
	if cmpErr != "" {
		t.Fatalf("page and API disagree on an idle cluster:\n%s", cmpErr)
	}
	node2 := clusterNet + ".22:8080"
	p := readPage(t, ctx)
	if s := p.Services["www"].Servers[node2]; s.Node != "node2" || s.Weight != 1 || s.Drain != "drain" {
		t.Fatalf("node2 before the drain: %+v", s)
	}

	runBounded(t, ctx, "clicking drain", chromedp.Click(chromedp.CSS(`[data-service="www"] button[data-action="drain"][data-node="node2"]`)))
	waitPage(t, ctx, "node2 at weight 0 in the director's report", `(() => { const r = document.querySelector('[data-service="www"] tr[data-node="node2"]');
		return r && r.querySelector('[data-field=weight]').textContent === '0' && r.querySelector('button[data-action=undrain]') !== null; })()`)
	st := status()
	for _, c := range st.Clusters {
		for _, s := range c.Services {
			for _, x := range s.Servers {
				if x.Node == "node2" && (x.Weight != 0 || !x.Drained) {
					t.Errorf("API after the drain: service %s %+v", s.Name, x)
				}
			}
		}
	}
	if len(st.Drained) != 1 || st.Drained[0] != "node2" {
		t.Errorf("drained after the click: %v", st.Drained)
	}
	for i := 0; i < 10; i++ {
		res, err := http.Get("http://" + clusterNet + ".100:8080/")
		if err != nil {
			t.Fatalf("request %d through the VIP after the drain: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request %d through the VIP after the drain: %s", i, res.Status)
		}
	}
}

// recorder collects a check's errors instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper()      {}
func (r *recorder) msgs() string { return strings.Join(r.errs, "\n") }
