package director

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func cluster(t *testing.T, dataplane, scheduler string) *launch.Cluster {
	t.Helper()
	cfg := launch.ClusterConfig{Bin: pfstest.Binary(t), Data: t.TempDir(), MetaListen: "127.0.0.1:0",
		IODListens: []string{"127.0.0.1:0", "127.0.0.1:0"}, NodeListen: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"},
		VIP: freeAddr(t, "tcp"), Admin: freeAddr(t, "tcp"), Dataplane: dataplane, Scheduler: scheduler,
		Check: "http path=/healthz status=200 interval=300ms timeout=250ms rise=2 fall=2"}
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
	return c
}

// admin is a client of the cluster's director with its token (written
// beside the configuration on the director's first start).
func admin(c *launch.Cluster) Client {
	tf := DefaultTokenFile(c.ConfPath)
	tok, _ := LoadToken(tf)
	return Client{Base: "http://" + c.Cfg.Admin, Token: tok, TokenFile: tf}
}

func status(t *testing.T, c *launch.Cluster) map[string]ServerStatus {
	t.Helper()
	st, err := admin(c).Services(context.Background())
	if err != nil || len(st) != 1 {
		t.Fatalf("services: %v %v", st, err)
	}
	out := map[string]ServerStatus{}
	for _, s := range st[0].Servers {
		out[s.Addr] = s
	}
	return out
}

// get fetches a path through the VIP on a fresh connection.
func get(vip, path string) (string, string, error) {
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + vip + path)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != 200 {
		return "", "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), resp.Header.Get("X-Served-By"), nil
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, d)
	return 0
}

func TestSpreadAsScheduled(t *testing.T) {
	for _, dp := range []string{"l4", "l7"} {
		t.Run(dp, func(t *testing.T) {
			c := cluster(t, dp, "rr")
			count := map[string]int{}
			for i := 0; i < 30; i++ {
				body, by, err := get(c.Cfg.VIP, "/")
				if err != nil || !strings.Contains(body, "It works") {
					t.Fatalf("request %d: %v %q", i, err, body)
				}
				count[by]++
			}
			for _, n := range c.Nodes {
				if count[n.Addr] != 10 {
					t.Fatalf("rr over 3 nodes: %v, want 10 each", count)
				}
			}
			// wrr after a live reload with weights 3:1:1.
			if err := c.WriteDirectorConf("wrr", []int{3, 1, 1}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "reload", 5*time.Second, func() bool { return status(t, c)[c.Nodes[0].Addr].ConfigWeight == 3 })
			clear(count)
			for i := 0; i < 50; i++ {
				_, by, err := get(c.Cfg.VIP, "/about.html")
				if err != nil {
					t.Fatal(err)
				}
				count[by]++
			}
			if count[c.Nodes[0].Addr] != 30 || count[c.Nodes[1].Addr] != 10 {
				t.Fatalf("wrr 3:1:1 over 50: %v", count)
			}
		})
	}
}

// load runs workers fetching through the VIP until stop, bounded by a
// deadline; it returns the number of requests and of failures.
func load(vip string, workers int, keepAlive bool, stop <-chan struct{}) (ok, failed *atomic.Int64, wait func()) {
	ok, failed = &atomic.Int64{}, &atomic.Int64{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keepAlive}, Timeout: 5 * time.Second}
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := cl.Get("http://" + vip + "/big.bin")
				if err == nil {
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || n != 1<<20 {
						err = fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	return ok, failed, wg.Wait
}

func TestKillNodeL7NoFailedGets(t *testing.T) {
	c := cluster(t, "l7", "rr")
	stop := make(chan struct{})
	ok, failed, wait := load(c.Cfg.VIP, 4, true, stop)
	time.Sleep(500 * time.Millisecond)
	victim := c.Nodes[1]
	victim.Kill()
	took := waitFor(t, "killed node leaves the pool", 3*time.Second, func() bool { return !status(t, c)[victim.Addr].Healthy })
	t.Logf("node left the pool %v after kill -9 (fall 2 x interval 300ms)", took.Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d GETs failed, %d succeeded: l7 must retry on another node", failed.Load(), ok.Load())
	}
	// It comes back.
	p, err := c.StartNode(context.Background(), 1, victim.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes[1] = p
	waitFor(t, "restarted node rejoins", 3*time.Second, func() bool { return status(t, c)[victim.Addr].Healthy })
}

// TestKillNodeL4OnlyItsConnectionsBreak: open one keep-alive connection per
// node, kill one node: the other connections go on working.
func TestKillNodeL4OnlyItsConnectionsBreak(t *testing.T) {
	c := cluster(t, "l4", "rr")
	type conn struct {
		nc net.Conn
		br *bufio.Reader
		by string
	}
	ask := func(cn *conn) (string, error) {
		cn.nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cn.nc.Write([]byte("GET /about.html HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(cn.br, nil)
		if err != nil {
			return "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Served-By"), nil
	}
	var conns []*conn
	for i := 0; i < 3; i++ {
		nc, err := net.Dial("tcp", c.Cfg.VIP)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		cn := &conn{nc: nc, br: bufio.NewReader(nc)}
		if cn.by, err = ask(cn); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	victim := c.Nodes[2]
	victim.Kill()
	broken := 0
	for _, cn := range conns {
		by, err := ask(cn)
		if cn.by == victim.Addr {
			if err == nil {
				t.Fatalf("connection to the killed node %s still answered (by %s)", victim.Addr, by)
			}
			broken++
			continue
		}
		if err != nil {
			t.Fatalf("connection to %s broke when %s was killed: %v", cn.by, victim.Addr, err)
		}
		if by != cn.by {
			t.Fatalf("connection moved from %s to %s", cn.by, by)
		}
	}
	if broken != 1 {
		t.Fatalf("%d connections were on the killed node, want 1", broken)
	}
	waitFor(t, "killed node leaves the pool", 3*time.Second, func() bool { return !status(t, c)[victim.Addr].Healthy })
	for i := 0; i < 6; i++ {
		if _, by, err := get(c.Cfg.VIP, "/"); err != nil || by == victim.Addr {
			t.Fatalf("after the node left: %v %s", err, by)
		}
	}
}

func mustReq(t *testing.T, u string) *http.Request {
	r, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestChangesMidLoadBreakNothing: weight changes, drains and reloads under a
// bounded load fail no request, and a drained node gets no new connections.
func TestChangesMidLoadBreakNothing(t *testing.T) {
	for _, dp := range []string{"l4", "l7"} {
		t.Run(dp, func(t *testing.T) {
			c := cluster(t, dp, "wlc")
			stop := make(chan struct{})
			ok, failed, wait := load(c.Cfg.VIP, 4, false, stop)
			a := admin(c)
			ctx := context.Background()
			steps := []func() error{
				func() error { return a.SetServer(ctx, "www", c.Nodes[0].Addr, "weight", 5) },
				func() error { return a.SetServer(ctx, "www", c.Nodes[1].Addr, "drain", 0) },
				func() error { return c.WriteDirectorConf("rr", []int{1, 2, 3}) },
				func() error { return a.SetServer(ctx, "www", c.Nodes[1].Addr, "enable", 0) },
				func() error { return c.WriteDirectorConf("sed", []int{2, 2, 1}) },
			}
			for _, step := range steps {
				time.Sleep(300 * time.Millisecond)
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(1500 * time.Millisecond)
			a.SetServer(ctx, "www", c.Nodes[2].Addr, "drain", 0)
			before := status(t, c)[c.Nodes[2].Addr].Connections
			time.Sleep(500 * time.Millisecond)
			close(stop)
			wait()
			if failed.Load() != 0 || ok.Load() == 0 {
				t.Fatalf("%d requests failed, %d succeeded", failed.Load(), ok.Load())
			}
			if after := status(t, c)[c.Nodes[2].Addr].Connections; after > before+4 {
				t.Fatalf("drained node got %d new connections", after-before)
			}
		})
	}
}

func TestBadReloadKeepsRunning(t *testing.T) {
	c := cluster(t, "l4", "rr")
	good, _ := os.ReadFile(c.ConfPath)
	bad := strings.Replace(string(good), "scheduler rr", "scheduler fastest", 1)
	line := strings.Count(bad[:strings.Index(bad, "scheduler fastest")], "\n") + 1 // the file's header may grow
	if err := os.WriteFile(c.ConfPath+".new", []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.ConfPath+".new", c.ConfPath); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rejection logged", 5*time.Second, func() bool {
		select {
		case <-c.Director.Done():
			t.Fatal("director exited")
		default:
		}
		b, _ := os.ReadFile(c.Director.Log)
		return strings.Contains(string(b), fmt.Sprintf("director.conf:%d: service www: scheduler: unknown scheduler", line))
	})
	if _, _, err := get(c.Cfg.VIP, "/"); err != nil {
		t.Fatalf("service broken after a rejected reload: %v", err)
	}
	if st, _ := admin(c).Services(context.Background()); st[0].Scheduler != "rr" {
		t.Fatalf("scheduler now %q", st[0].Scheduler)
	}
}
