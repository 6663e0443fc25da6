package director

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// withQoS adds classes to a director.conf and a limit to its l7 service;
// the running director reloads the file.
func withQoS(t *testing.T, path, classes string, inflight string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(b), "    dataplane l7\n", "    dataplane l7\n    qos-inflight "+inflight+"\n", 1)
	if err := os.WriteFile(path+".tmp", []byte(classes+conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestQoSOverloadRealProcesses: a real cluster (meta, an I/O server, two
// nodes serving classes on niced threads, the l7 director) driven far
// past its admission limit by best-effort clients: every gold request is
// answered 200 while best-effort requests are shed with 503 and their
// class's Retry-After.
func TestQoSOverloadRealProcesses(t *testing.T) {
	cfg := launch.ClusterConfig{Bin: pfstest.Binary(t), Data: t.TempDir(), MetaListen: "127.0.89.10:0",
		IODListens: []string{"127.0.89.11:0"}, NodeListen: []string{"127.0.89.21:0", "127.0.89.22:0"},
		VIP: h8Addr(t, 100), Admin: h8Addr(t, 1), Dataplane: "l7", Scheduler: "wlc",
		Check: "http path=/healthz status=200 interval=300ms timeout=250ms rise=1 fall=2",
		Args: func(role string) []string {
			if strings.HasPrefix(role, "node") {
				return []string{"--qos-workers", "2", "--qos-trust", "127.0.0.0/8"}
			}
			return nil
		}}
	c, err := launch.StartCluster(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range append(c.Nodes, c.Director) {
				t.Logf("%s log: %s", p.Name, launch.Tail(p.Log, 15))
			}
		}
	})
	withQoS(t, c.ConfPath, `qos gold {
    priority 10
    header X-Tier: gold
    overload queue deadline=10s retry-after=1
}
qos default { overload queue deadline=1ms retry-after=3 }
`, "2")
	metrics := func() string {
		resp, err := http.Get("http://" + cfg.Admin + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor(t, "the director to load the classes", 15*time.Second, func() bool {
		get(cfg.VIP, "/") // the state is built on the first request after a reload
		return strings.Contains(metrics(), `corral_director_qos_limit{service="www"} 2`)
	})

	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 20 * time.Second}
	fetch := func(gold bool) (int, string, error) {
		req, _ := http.NewRequest("GET", "http://"+cfg.VIP+"/index.html", nil)
		if gold {
			req.Header.Set("X-Tier", "gold")
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	stop := make(chan struct{})
	var beOK, beShed, beOther atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				code, ra, err := fetch(false)
				switch {
				case err == nil && code == 200:
					beOK.Add(1)
				case err == nil && code == 503 && ra == "3":
					beShed.Add(1)
				default:
					beOther.Add(1)
				}
			}
		}()
	}
	var goldOK, goldBad int
	for i := 0; i < 200 && (i < 50 || beShed.Load() == 0); i++ {
		code, _, err := fetch(true)
		if err != nil || code != 200 {
			goldBad++
			t.Logf("gold request: %d %v", code, err)
		} else {
			goldOK++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("gold: %d ok, %d not; best-effort: %d ok, %d shed (503, Retry-After 3), %d other", goldOK, goldBad, beOK.Load(), beShed.Load(), beOther.Load())
	if goldBad != 0 {
		t.Errorf("%d gold requests were not answered 200", goldBad)
	}
	if beShed.Load() == 0 {
		t.Errorf("no best-effort request was shed under overload")
	}
	if beOther.Load() != 0 {
		t.Errorf("%d best-effort requests failed otherwise than 503 + Retry-After", beOther.Load())
	}
	// The nodes served best-effort on threads with its nice (gold 0, the
	// default class 5): workers stay 30 s after their last request.
	niced := 0
	for _, n := range c.Nodes {
		niced += threadsWithNice(t, n.Pid(), 5)
	}
	if niced == 0 {
		t.Errorf("no node thread has nice 5 (the default class's) after serving it")
	}
	m := metrics()
	if !strings.Contains(m, `corral_director_qos_shed_total{class="gold",reason="deadline",service="www"} 0`) {
		t.Errorf("gold shed in the metrics:\n%s", grepLines(m, "corral_director_qos_shed_total"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// threadsWithNice counts process pid's threads whose nice is nice
// (/proc/PID/task/TID/stat, field 19).
func threadsWithNice(t *testing.T, pid, nice int) int {
	t.Helper()
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, d.Name()))
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 16 && f[16] == strconv.Itoa(nice) {
			n++
		}
	}
	return n
}
