package xdp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/testbed"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// drCluster is a whole cluster on a test bed with the director doing direct
// routing in XDP: client, director, three nodes, meta and an iod.
type drCluster struct {
	bed   *testbed.Bed
	cl    *launch.Cluster
	vip   string
	admin director.Client
}

func startDR(t *testing.T) *drCluster {
	t.Helper()
	lab.Need(t, lab.Netns, lab.XDP)
	bin := pfstest.Binary(t)
	name := fmt.Sprintf("x%d", time.Now().UnixNano()%1000000)
	hosts := append([]string{"client"}, launch.ClusterHosts(3, 1)...)
	// A subnet of its own: other packages' test beds run at the same time.
	bed, err := testbed.Up(testbed.NewSpecOn(name, netip.MustParsePrefix("10.79.0.0/24"), hosts, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Down(name) })
	cfg := launch.ClusterConfig{Bin: bin, Data: t.TempDir(), Admin: "127.0.0.1:7500", Dataplane: "xdp", Scheduler: "rr",
		Check: "http port=9080 path=/healthz status=200 interval=300ms timeout=200ms rise=1 fall=2"}
	if err := cfg.OnTestbed(bed, 3, 1); err != nil {
		t.Fatal(err)
	}
	if err := bed.PrepareDR(xdp.AttachPass, "director", "client"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := launch.StartCluster(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop(); cancel() })
	// The director wrote its admin token beside its configuration.
	token, err := director.LoadToken(director.DefaultTokenFile(cl.ConfPath))
	if err != nil {
		t.Fatal(err)
	}
	c := &drCluster{bed: bed, cl: cl, vip: cfg.VIP,
		admin: director.Client{Base: "http://" + cfg.Admin, Token: token, HTTP: &http.Client{Timeout: 5 * time.Second,
			Transport: &http.Transport{DialContext: bed.DialContext("director")}}}}
	// The first SYNs wait for ARP (the director learns the nodes' MACs).
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, _, err := c.get(c.oneShot(), "/"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the VIP never answered: %v\ndirector log:\n%s", err, launch.Tail(cl.Director.Log, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// oneShot is an HTTP client in the client host, a new connection per request.
func (c *drCluster) oneShot() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.bed.DialContext("client"), DisableKeepAlives: true}}
}

// keepAlive is an HTTP client in the client host holding one connection.
func (c *drCluster) keepAlive() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.bed.DialContext("client"), MaxConnsPerHost: 1}}
}

// get fetches path through the VIP; it returns the serving node and the size.
func (c *drCluster) get(hc *http.Client, path string) (string, int64, error) {
	resp, err := hc.Get("http://" + c.vip + path)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return "", n, err
	}
	if resp.StatusCode != 200 {
		return "", n, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return resp.Header.Get("X-Served-By"), n, nil
}

func (c *drCluster) status(t *testing.T) director.ServiceStatus {
	t.Helper()
	st, err := c.admin.Services(context.Background())
	if err != nil || len(st) != 1 {
		t.Fatalf("admin API: %v %v", st, err)
	}
	return st[0]
}

func TestDirectRouting(t *testing.T) {
	c := startDR(t)
	hc := c.oneShot()

	t.Run("rr spreads new connections", func(t *testing.T) {
		by := map[string]int{}
		for range 30 {
			node, _, err := c.get(hc, "/")
			if err != nil {
				t.Fatal(err)
			}
			by[node]++
		}
		if len(by) != 3 {
			t.Fatalf("spread %v, want 10 on each of 3 nodes", by)
		}
		for n, k := range by {
			if k != 10 {
				t.Fatalf("spread %v: %s got %d, want 10", by, n, k)
			}
		}
	})

	t.Run("replies bypass the director", func(t *testing.T) {
		before := c.status(t)
		var total int64
		for range 8 {
			_, n, err := c.get(hc, "/big.bin")
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
		time.Sleep(400 * time.Millisecond) // one sync of the counters
		after := c.status(t)
		in := after.XDP.Bytes - before.XDP.Bytes
		if total != 8<<20 || in == 0 || float64(in) > 0.1*float64(total) {
			t.Fatalf("clients got %d bytes; the director saw %d bytes of the service: replies did not bypass it", total, in)
		}
		t.Logf("clients received %d bytes; the director forwarded %d (%.1f%%): only requests and ACKs", total, in, 100*float64(in)/float64(total))
		for _, s := range after.Servers {
			if s.BytesOut != 0 {
				t.Fatalf("%s: bytes out %d through the director", s.Addr, s.BytesOut)
			}
		}
		// The same counters reach /metrics.
		resp, err := c.admin.HTTP.Get(c.admin.Base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			"corral_director_xdp_packets_total{service=\"www\"} ",
			"corral_director_xdp_drops_total{reason=\"no_real\",service=\"www\"} ",
			"corral_director_xdp_passed_total{why=\"not_a_service\"} ",
			"corral_director_packets_total{server=",
		} {
			if !strings.Contains(string(m), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		// The xdp-only metrics are as clean as the rest (internal/obs lints
		// every daemon without xdp).
		problems, err := promlint.New(bytes.NewReader(m)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("/metrics lint: %s: %s", p.Metric, p.Text)
		}
	})

	t.Run("pool and weight changes keep established connections", func(t *testing.T) {
		const workers = 6
		var failures atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		moved := make(chan string, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ka := c.keepAlive()
				first := ""
				for i := 0; i < 2000; i++ { // bounded; stop ends it sooner
					select {
					case <-stop:
						return
					default:
					}
					node, _, err := c.get(ka, "/")
					if err != nil {
						failures.Add(1)
						t.Errorf("worker %d request %d: %v", w, i, err)
						return
					}
					if first == "" {
						first = node
					} else if node != first {
						moved <- fmt.Sprintf("worker %d moved from %s to %s", w, first, node)
						return
					}
				}
			}()
		}
		ctx := context.Background()
		nodes := c.cl.Nodes
		time.Sleep(300 * time.Millisecond)
		if err := c.admin.SetServer(ctx, "www", nodes[0].Addr, "drain", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := c.admin.SetServer(ctx, "www", nodes[1].Addr, "weight", 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		// Remove node3 from the configuration: the director reloads it.
		c.cl.Nodes = nodes[:2]
		err := c.cl.WriteDirectorConf("wrr", []int{1, 1})
		c.cl.Nodes = nodes
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(c.status(t).Servers) != 2 {
			if time.Now().After(deadline) {
				t.Fatal("the director did not reload the pool without node3")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		close(moved)
		for m := range moved {
			t.Error(m)
		}
		if failures.Load() > 0 {
			t.Fatalf("%d established connections broke", failures.Load())
		}
		// New connections: not to the drained node1 nor the removed node3.
		for range 12 {
			node, _, err := c.get(hc, "/")
			if err != nil {
				t.Fatal(err)
			}
			if node == nodes[0].Addr || node == nodes[2].Addr {
				t.Fatalf("a new connection went to %s (drained or removed)", node)
			}
		}
		// Back to the start for the next test.
		if err := c.admin.SetServer(ctx, "www", nodes[0].Addr, "enable", 0); err != nil {
			t.Fatal(err)
		}
		if err := c.cl.WriteDirectorConf("rr", nil); err != nil {
			t.Fatal(err)
		}
		for len(c.status(t).Servers) != 3 {
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("a killed node leaves the pool", func(t *testing.T) {
		victim := c.cl.Nodes[1]
		var mu sync.Mutex
		var downAt time.Time
		var late []string
		var ok, failed, after atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(5 * time.Second)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hc := c.oneShot()
				for i := 0; i < 5000 && time.Now().Before(end); i++ { // bounded in count and time
					start := time.Now()
					_, _, err := c.get(hc, "/")
					mu.Lock()
					isLate := !downAt.IsZero() && start.After(downAt)
					mu.Unlock()
					if isLate {
						after.Add(1)
					}
					if err == nil {
						ok.Add(1)
						continue
					}
					failed.Add(1)
					if isLate {
						mu.Lock()
						late = append(late, err.Error())
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Second)
		victim.Kill()
		killed := time.Now()
		for {
			st := c.status(t)
			gone := false
			for _, s := range st.Servers {
				gone = gone || (s.Addr == victim.Addr && !s.Healthy && s.Weight == 0)
			}
			if gone {
				// The kernel has the new weights within one sync.
				mu.Lock()
				downAt = time.Now().Add(300 * time.Millisecond)
				mu.Unlock()
				break
			}
			if time.Since(killed) > 3*time.Second {
				t.Fatal("the killed node is still in the pool after 3 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("node out of the pool %v after the kill", time.Since(killed).Round(10*time.Millisecond))
		wg.Wait()
		if len(late) > 0 {
			t.Fatalf("%d requests failed after the node left the pool: %v", len(late), late[0])
		}
		if after.Load() < 50 {
			t.Fatalf("only %d requests after the node left the pool: the load ended too soon", after.Load())
		}
		t.Logf("%d requests: %d failed before the director noticed, none of the %d after", ok.Load()+failed.Load(), failed.Load(), after.Load())
	})
}
