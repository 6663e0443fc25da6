package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	clientv3 "go.etcd.io/etcd/client/v3"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// serveCountedLoad is serveLoad counting the requests at the handler.
func serveCountedLoad(t *testing.T, addr string, c feedback.LocalConfig) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	h := feedback.LoadHandler(c)
	mux := http.NewServeMux()
	mux.Handle("GET /load", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); h.ServeHTTP(w, r) }))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &n
}

// threeStations starts stations forming one etcd cluster on ips (at once:
// each member waits for the others), each with tune applied to its options
// if given.
func threeStations(t *testing.T, ips []string, tune func(*Options)) []*tstation {
	t.Helper()
	var ic []string
	for _, ip := range ips {
		ic = append(ic, "st-"+strings.ReplaceAll(ip, ".", "-")+"=https://"+ip+":7602")
	}
	opts := make([]Options, len(ips))
	dirs := make([]string, len(ips))
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	if err := InitCA(dirs...); err != nil {
		t.Fatal(err)
	}
	sts := make([]*Station, len(ips))
	errs := make([]error, len(ips))
	var wg sync.WaitGroup
	for i, ip := range ips {
		opts[i] = stationOpts(ip, dirs[i])
		opts[i].EtcdInitialCluster = strings.Join(ic, ",")
		if tune != nil {
			tune(&opts[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = New(opts[i])
		}()
	}
	wg.Wait()
	for i := range sts {
		if errs[i] != nil {
			for _, s := range sts {
				if s != nil {
					s.Close()
				}
			}
			t.Fatalf("station %d: %v", i, errs[i])
		}
	}
	var ts []*tstation
	for i := range sts {
		ts = append(ts, serve(t, sts[i], opts[i]))
	}
	return ts
}

// pollerGauge is corral_mgmt_feedback_poller at ts's /metrics (-1: absent).
func pollerGauge(t *testing.T, ts *tstation) int {
	resp, err := ts.client(t, "").HTTP.Get(ts.url + api.RouteMetrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		switch l {
		case "corral_mgmt_feedback_poller 1":
			return 1
		case "corral_mgmt_feedback_poller 0":
			return 0
		}
	}
	return -1
}

// follow long-polls ts's /v1/feedback until ctx ends and returns the
// publications it saw by seq; it fails the test on a seq that does not
// increase.
func follow(ctx context.Context, t *testing.T, ts *tstation) map[uint64]time.Time {
	c := ts.client(t, ts.admin)
	seen := map[uint64]time.Time{}
	var after uint64
	for ctx.Err() == nil {
		var pub director.FeedbackStatus
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Do(rctx, http.MethodGet, api.RouteFeedback+"?wait=2s&after="+strconv.FormatUint(after, 10), nil, &pub)
		cancel()
		if err != nil || pub.Seq == 0 {
			continue // the wait passed (204), or ctx ended
		}
		if after != 0 && pub.Seq <= after {
			t.Errorf("station %s: seq %d after %d", ts.ip, pub.Seq, after)
		}
		seen[pub.Seq], after = pub.Time, pub.Seq
	}
	return seen
}

// followAll runs follow on every station for d; seen[i] is station i's.
func followAll(t *testing.T, sts []*tstation, d time.Duration) []map[uint64]time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	seen := make([]map[uint64]time.Time, len(sts))
	var wg sync.WaitGroup
	for i, ts := range sts {
		wg.Add(1)
		go func() { defer wg.Done(); seen[i] = follow(ctx, t, ts) }()
	}
	wg.Wait()
	return seen
}

// sameSeries fails unless the stations saw one series: a seq seen at two
// stations is the same publication (same time), and some seq was seen at
// all of them. It returns the highest seq seen.
func sameSeries(t *testing.T, seen []map[uint64]time.Time) uint64 {
	t.Helper()
	var top uint64
	common := 0
	for seq, at := range seen[0] {
		all := true
		for i := 1; i < len(seen); i++ {
			if at2, ok := seen[i][seq]; !ok {
				all = false
			} else if !at2.Equal(at) {
				t.Errorf("seq %d: station 0 has time %v, station %d %v: two series", seq, at, i, at2)
			}
		}
		if all {
			common++
		}
	}
	for _, m := range seen {
		for seq := range m {
			top = max(top, seq)
		}
	}
	if common == 0 {
		t.Errorf("no publication seen at every station: %v", seen)
	}
	return top
}

// TestFeedbackOnePoller: three stations (one etcd cluster) and a feedback
// section: exactly one station polls (one request a round at each real
// /load handler, not three) and all three serve the same publications.
// When the poller stops, another takes over within the lease's TTL and
// the seq keeps increasing.
func TestFeedbackOnePoller(t *testing.T) {
	sts := threeStations(t, []string{"127.0.74.1", "127.0.74.2", "127.0.74.3"}, nil)
	c1 := serveCountedLoad(t, "127.0.74.11:7180", feedback.LocalConfig{Node: "n1", Interface: "lo"})
	c2 := serveCountedLoad(t, "127.0.74.12:7181", feedback.LocalConfig{Node: "n2", Interface: "lo", ProcRoot: skewedProc(t)})
	mustApply(t, sts[0].client(t, sts[0].admin), 0, strings.ReplaceAll(fbYAML, "127.0.71.", "127.0.74."))

	// Every station serves a publication with both servers' terms.
	for _, ts := range sts {
		c := ts.client(t, ts.admin)
		var pub director.FeedbackStatus
		if !waitCond(15*time.Second, func() bool {
			pub = director.FeedbackStatus{}
			return c.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &pub) == nil && len(pub.Services) == 1 &&
				len(pub.Services[0].Nodes) == 2 && pub.Services[0].Nodes[0].Terms != nil
		}) {
			t.Fatalf("station %s: no publication with terms: %+v", ts.ip, pub)
		}
	}
	poller := func(among []*tstation) (int, []int) {
		who, gauges := -1, make([]int, len(among))
		for i, ts := range among {
			if gauges[i] = pollerGauge(t, ts); gauges[i] == 1 {
				if who >= 0 {
					return -2, gauges
				}
				who = i
			}
		}
		return who, gauges
	}
	who, gauges := poller(sts)
	if who < 0 {
		t.Fatalf("corral_mgmt_feedback_poller at the three stations: %v: want one 1", gauges)
	}

	// One request a round at each handler, and one series everywhere.
	n1, n2 := c1.Load(), c2.Load()
	seen := followAll(t, sts, 2500*time.Millisecond)
	d1, d2 := c1.Load()-n1, c2.Load()-n2
	lo, hi := uint64(1<<63), uint64(0)
	for seq := range seen[0] {
		lo, hi = min(lo, seq), max(hi, seq)
	}
	rounds := int64(hi - lo + 1)
	t.Logf("poller %s; in 2.5 s: %d and %d requests at the handlers, seq %d..%d (%d rounds)", sts[who].ip, d1, d2, lo, hi, rounds)
	if rounds < 4 {
		t.Fatalf("only %d rounds in 2.5 s at 300ms", rounds)
	}
	// Three pollers would make three requests a round; allow a round
	// at each end of the window.
	for i, d := range []int64{d1, d2} {
		if d > rounds+2 || d < rounds-2 {
			t.Errorf("handler %d: %d requests for %d rounds: want one a round", i+1, d, rounds)
		}
	}
	top := sameSeries(t, seen)

	// The poller's weights, from etcd: n2 (load average 500) at the
	// floor, far from the initial weight (max, 1000).
	other := sts[(who+1)%3].s.cli
	resp, err := other.Get(ctxT(t), keyFBPub)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("publication in etcd: %v %v", err, resp)
	}
	var old director.FeedbackStatus
	if err := json.Unmarshal(resp.Kvs[0].Value, &old); err != nil {
		t.Fatal(err)
	}
	oldW := pubWeights(old)
	if oldW["127.0.74.12:8080"] >= 1000 || oldW["127.0.74.11:8080"] == 0 {
		t.Fatalf("weights before the takeover %v: want n2 below the initial 1000", oldW)
	}

	// The poller stops: another takes over within the TTL (5 s), the seq
	// carries on.
	stopped := time.Now()
	sts[who].stop()
	rest := append(append([]*tstation{}, sts[:who]...), sts[who+1:]...)
	if !waitCond(8*time.Second, func() bool { w, _ := poller(rest); return w >= 0 }) {
		_, g := poller(rest)
		t.Fatalf("no station took over polling: gauges %v", g)
	}
	took := time.Since(stopped)
	seen = followAll(t, rest, 2*time.Second)
	lo = uint64(1 << 63)
	for _, m := range seen {
		for seq := range m {
			lo = min(lo, seq)
		}
	}
	top2 := sameSeries(t, seen)
	// The first look may be the old poller's last publication (top).
	if lo < top || top2 <= top {
		t.Fatalf("after the takeover seq %d..%d: want from %d on and increasing", lo, top2, top)
	}
	w2, _ := poller(rest)
	t.Logf("takeover by %s within %v; seq %d then %d..%d", rest[w2].ip, took.Round(time.Millisecond), top, lo, top2)
	// The new poller's first round (its controllers have one sample each,
	// no rates) carries the old weights on: seeded from the last
	// publication, not the initial 1000, which sent a slow server a full
	// share until its load told again. etcd's history holds every
	// publication since: the long polls above may skip one.
	wctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	var first map[string]int
	for ev := range rest[0].s.cli.Watch(wctx, keyFBPub, clientv3.WithRev(resp.Kvs[0].ModRevision+1)) {
		for _, e := range ev.Events {
			var pub director.FeedbackStatus
			if first != nil || json.Unmarshal(e.Kv.Value, &pub) != nil || len(pub.Services) != 1 || len(pub.Services[0].Nodes) != 2 {
				continue
			}
			if pub.Services[0].Nodes[0].Terms == nil && pub.Services[0].Nodes[1].Terms == nil {
				first = pubWeights(pub)
				t.Logf("the new poller's first round: seq %d, weights %v (the last poller's: seq %d, %v)", pub.Seq, first, old.Seq, oldW)
			}
		}
		if first != nil {
			break
		}
	}
	if first == nil {
		t.Error("no first round of the new poller in etcd's history")
	} else if !maps.Equal(first, oldW) {
		t.Errorf("the new poller's first round: weights %v, want the last poller's %v", first, oldW)
	}
}

// pubWeights is a one-service publication's weights by server.
func pubWeights(p director.FeedbackStatus) map[string]int {
	out := map[string]int{}
	for _, s := range p.Services {
		for _, n := range s.Nodes {
			out[n.Node] = n.Weight
		}
	}
	return out
}

// TestFeedbackPollerAfterRestore: a backup taken while a station polls
// holds its election key (on a lease that the restored etcd does not
// have); restore leaves it out, so the restored station is elected and
// its seq carries on from the restored publication.
func TestFeedbackPollerAfterRestore(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.74.5", t.TempDir()))
	serveCountedLoad(t, "127.0.74.11:7180", feedback.LocalConfig{Node: "n1", Interface: "lo"})
	serveCountedLoad(t, "127.0.74.12:7181", feedback.LocalConfig{Node: "n2", Interface: "lo"})
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, strings.ReplaceAll(fbYAML, "127.0.71.", "127.0.74."))
	var pub director.FeedbackStatus
	if !waitCond(10*time.Second, func() bool {
		return pollerGauge(t, ts) == 1 && admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &pub) == nil && pub.Seq > 0
	}) {
		t.Fatalf("the station never polled: gauge %d, seq %d", pollerGauge(t, ts), pub.Seq)
	}
	var buf bytes.Buffer
	if err := admin.Do(ctxT(t), http.MethodGet, api.RouteBackup, nil, &buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "st.backup")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	var saved director.FeedbackStatus
	if err := admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &saved); err == nil {
		t.Fatal("the stopped station still answers")
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if err := Restore(file, dir); err != nil {
		t.Fatal(err)
	}
	ts2 := startStation(t, stationOpts("127.0.74.6", dir))
	admin2 := ts2.client(t, ts2.admin)
	var pub2 director.FeedbackStatus
	if !waitCond(10*time.Second, func() bool {
		return pollerGauge(t, ts2) == 1 && admin2.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &pub2) == nil && pub2.Seq > pub.Seq+1
	}) {
		t.Fatalf("the restored station does not poll: gauge %d, seq %d (backup after seq %d)", pollerGauge(t, ts2), pub2.Seq, pub.Seq)
	}
	t.Logf("seq %d at the backup, %d at the restored station", pub.Seq, pub2.Seq)
}

// TestFeedbackPollerLeaseExpiry: a poller that crashed leaves its
// election key on a lease nobody keeps alive (made here with a 5 s lease
// before the station stands); the station polls only once that lease
// ends.
func TestFeedbackPollerLeaseExpiry(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.74.7", t.TempDir()))
	serveCountedLoad(t, "127.0.74.11:7180", feedback.LocalConfig{Node: "n1", Interface: "lo"})
	n2 := serveCountedLoad(t, "127.0.74.12:7181", feedback.LocalConfig{Node: "n2", Interface: "lo"})
	lease, err := ts.s.cli.Grant(ctxT(t), 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.s.cli.Put(ctxT(t), keyFBPoller+"/dead", "crashed station", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustApply(t, ts.client(t, ts.admin), 0, strings.ReplaceAll(fbYAML, "127.0.71.", "127.0.74."))
	if !waitCond(10*time.Second, func() bool { return pollerGauge(t, ts) == 1 }) {
		t.Fatal("the station never took over from the dead poller")
	}
	took := time.Since(start)
	if took < 4*time.Second {
		t.Fatalf("polling after %v: before the dead poller's lease (5 s) ended", took)
	}
	if !waitCond(5*time.Second, func() bool { return n2.Load() > 0 }) {
		t.Fatal("no poll at n2's /load after the takeover")
	}
	t.Logf("took over %v after the dead poller's 5 s lease was made", took.Round(time.Millisecond))

	// A version without the section: the station stops polling and
	// publishes one empty publication (the directors' configured weights).
	admin := ts.client(t, ts.admin)
	var last director.FeedbackStatus
	if err := admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &last); err != nil {
		t.Fatal(err)
	}
	plain := strings.ReplaceAll(fbYAML[:strings.Index(fbYAML, "feedback:\n  source")], "127.0.71.", "127.0.74.")
	mustApply(t, admin, 1, strings.Replace(plain, "    weights: feedback\n", "", 1))
	var pub director.FeedbackStatus
	if !waitCond(10*time.Second, func() bool {
		pub = director.FeedbackStatus{}
		return admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &pub) == nil && pub.Source == "none"
	}) {
		t.Fatalf("no empty publication after the section went: %+v", pub)
	}
	if len(pub.Services) != 0 || pub.Seq <= last.Seq || pollerGauge(t, ts) != 0 {
		t.Fatalf("empty publication %+v (last seq %d), poller gauge %d", pub, last.Seq, pollerGauge(t, ts))
	}
}
