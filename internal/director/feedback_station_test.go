package director

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/feedback"
)

// stationConf is a director fed by the station: no feedback block; its
// pool as the station's view cuts it (127.0.71.0/24 is this helper's).
func stationConf(vip string, servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "admin 127.0.0.1:0\nservice www {\n    vip %s\n    scheduler wrr\n    check none\n", vip)
	for _, s := range servers {
		fmt.Fprintf(&b, "    server %s weight=7\n", s)
	}
	b.WriteString("}\n")
	return b.String()
}

func publication(seq uint64, at time.Time, weights map[string]int) FeedbackStatus {
	st := FeedbackStatus{Source: "agent", Interval: "300ms", Seq: seq, Time: at, Floor: 1}
	if weights != nil {
		ps := FeedbackService{Name: "www"}
		for n, w := range weights {
			ps.Nodes = append(ps.Nodes, FeedbackNode{Decision: feedback.Decision{Node: n, Weight: w}})
		}
		st.Services = append(st.Services, ps)
	}
	return st
}

// TestStationFeedbackApply: the station's weights go into the fb path;
// an older publication is ignored; a server or service the station stops
// listing goes back to its configured weight; a new version keeps the
// station's weights (a new server gets none until listed); a director
// running its own block refuses the station's.
func TestStationFeedbackApply(t *testing.T) {
	const a, b, c = "127.0.71.41:8080", "127.0.71.42:8080", "127.0.71.43:8080"
	vip := freeAddr(t, "tcp")
	d := start(t, stationConf(vip, a, b))
	t0 := time.Now()
	if err := d.ApplyStationFeedback(publication(5, t0, map[string]int{a: 50, b: 20})); err != nil {
		t.Fatal(err)
	}
	if sa, sb := serverState(d, "www", a), serverState(d, "www", b); sa.Feedback != 50 || sa.Weight != 50 || sb.Weight != 20 {
		t.Fatalf("after publication 5: %+v %+v", sa, sb)
	}
	st, err := d.FeedbackStatus()
	if err != nil || st.Source != "station" || st.Poll != "agent" || st.Seq != 5 {
		t.Fatalf("status %+v, %v", st, err)
	}
	// Older (same time, lower seq): ignored.
	d.ApplyStationFeedback(publication(4, t0, map[string]int{a: 3, b: 3}))
	if s := serverState(d, "www", a); s.Weight != 50 {
		t.Fatalf("an older publication was applied: %+v", s)
	}
	// A restarted station (seq from 1, later time): applied.
	if err := d.ApplyStationFeedback(publication(1, t0.Add(time.Second), map[string]int{a: 40})); err != nil {
		t.Fatal(err)
	}
	if sa, sb := serverState(d, "www", a), serverState(d, "www", b); sa.Weight != 40 || sb.Feedback != -1 || sb.Weight != 7 {
		t.Fatalf("b no longer listed: want its configured 7: %+v %+v", sa, sb)
	}
	// A new version adds c: a keeps the station's weight at once.
	cfg, err := config.Parse("test.conf", []byte(stationConf(vip, a, b, c)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if sa, sc := serverState(d, "www", a), serverState(d, "www", c); sa.Weight != 40 || sc.Feedback != -1 {
		t.Fatalf("after a new version: %+v %+v", sa, sc)
	}
	// A timeout above the interval: the grace counts in timeouts (a
	// round with a silent server lasts that long).
	p := publication(6, t0.Add(1500*time.Millisecond), map[string]int{a: 40})
	p.Timeout = "2s"
	if err := d.ApplyStationFeedback(p); err != nil {
		t.Fatal(err)
	}
	d.sfb.mu.Lock()
	iv := d.sfb.interval
	d.sfb.mu.Unlock()
	if iv != 2*time.Second {
		t.Fatalf("period %v with interval 300ms and timeout 2s: want 2s", iv)
	}
	// The station's section is gone: an empty publication.
	if err := d.ApplyStationFeedback(publication(2, t0.Add(2*time.Second), nil)); err != nil {
		t.Fatal(err)
	}
	if s := serverState(d, "www", a); s.Feedback != -1 || s.Weight != 7 {
		t.Fatalf("after an empty publication: %+v", s)
	}
	if st, err := d.FeedbackStatus(); err == nil {
		t.Fatalf("after an empty publication: status %+v, want none (no feedback anywhere)", st)
	}

	own := start(t, fmt.Sprintf("admin 127.0.0.1:0\nfeedback {\n    source agent\n    agent-port 1\n    interval 1s\n}\nservice www {\n    vip %s\n    scheduler wrr\n    weights feedback\n    check none\n    server %s\n}\n", freeAddr(t, "tcp"), a))
	if err := own.ApplyStationFeedback(publication(1, t0, map[string]int{a: 9})); err == nil {
		t.Fatal("a director with its own feedback block took the station's weights")
	}
}

// TestStationKeep: kept whole for StationGrace intervals, then halved
// every two.
func TestStationKeep(t *testing.T) {
	iv := 300 * time.Millisecond
	got := time.Unix(1000, 0)
	for _, c := range []struct {
		after time.Duration
		want  float64
	}{{0, 1}, {3 * iv, 1}, {5 * iv, 0.5}, {7 * iv, 0.25}} {
		if k := stationKeep(got, got.Add(c.after), iv); math.Abs(k-c.want) > 1e-9 {
			t.Errorf("after %v: keep %g, want %g", c.after, k, c.want)
		}
	}
	for _, c := range []struct {
		w, floor int
		keep     float64
		want     int64
	}{{1000, 1, 1, 1000}, {1000, 1, 0.5, 501}, {1000, 1, 0, 1}, {3, 5, 0.5, 3}, {10, 1, 0.01, 1}} {
		if v := decayed(c.w, c.floor, c.keep); v != c.want {
			t.Errorf("decayed(%d, %d, %g) = %d, want %d", c.w, c.floor, c.keep, v, c.want)
		}
	}
}

func TestDecodeStationFeedback(t *testing.T) {
	good, _ := json.Marshal(publication(3, time.Now(), map[string]int{"127.0.71.41:8080": 12}))
	if st, err := DecodeStationFeedback(good); err != nil || st.Seq != 3 || st.Services[0].Nodes[0].Weight != 12 {
		t.Fatalf("good publication: %+v, %v", st, err)
	}
	for _, bad := range []string{
		``, `[]`, `{"interval":"5ms"}`, `{"interval":"2s","floor":-1}`,
		`{"interval":"2s","services":[{"name":"www","servers":[{"node":"x","weight":70000}]}]}`,
		`{"interval":"2s","services":[{"name":"www","servers":[{"node":"x","weight":-2}]}]}`,
		`{"interval":"2s","timeout":"2h"}`, `{"interval":"2s","timeout":"soon"}`,
	} {
		if _, err := DecodeStationFeedback([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// FuzzDecodeStationFeedback: the agent hands the station's bytes to the
// director: whatever they are, decoding does not panic, and what it
// accepts has weights and a floor the fb path can take.
func FuzzDecodeStationFeedback(f *testing.F) {
	good, _ := json.Marshal(publication(3, time.Now(), map[string]int{"127.0.71.41:8080": 12}))
	f.Add(good)
	f.Add([]byte(`{"interval":"2s","services":[{"name":"www","servers":[{"node":"x","weight":70000}]}]}`))
	f.Add([]byte(`{"interval":"1m","seq":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeStationFeedback(b)
		if err != nil {
			return
		}
		if st.Floor < 0 || st.Floor > 65535 {
			t.Fatalf("accepted floor %d", st.Floor)
		}
		for _, s := range st.Services {
			for _, n := range s.Nodes {
				if n.Weight < 0 || n.Weight > 65535 {
					t.Fatalf("accepted weight %d", n.Weight)
				}
			}
		}
	})
}
