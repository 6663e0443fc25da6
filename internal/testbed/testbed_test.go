package testbed

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func needRoot(t *testing.T) {
	t.Helper()
	lab.Need(t, lab.Netns)
}

// leftovers lists what of bed name still exists.
func leftovers(name string) []string {
	var out []string
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), name+"-") {
				out = append(out, "netns "+e.Name())
			}
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], name+"-") {
			out = append(out, "link "+f[1])
		}
	}
	if _, err := os.Stat(statePath(name)); err == nil {
		out = append(out, "state file")
	}
	return out
}

func bedName(t *testing.T) string {
	return fmt.Sprintf("t%d", time.Now().UnixNano()%1000000)
}

func TestUpShapeDown(t *testing.T) {
	needRoot(t)
	name := bedName(t)
	spec := NewSpec(name, []string{"a", "b", "c"}, "100mbit")
	spec.Hosts[2].Rate = ""
	t.Cleanup(func() { Down(name) })
	b, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Up(spec); err != nil {
		t.Fatalf("second up of the same bed: %v", err)
	}
	other := spec
	other.Hosts = append([]Host(nil), spec.Hosts...)
	other.Hosts[0].Rate = "1gbit"
	if _, err := Up(other); err == nil {
		t.Fatal("up with different rates over an existing bed succeeded")
	}
	bin := pfstest.Binary(t)
	ctx := context.Background()
	// A sink on b; a process that Down must kill. It announces itself on
	// stdout once listening.
	sinkAddr := b.Hosts[1].Addr.String() + ":5001"
	sink, _ := b.Command(ctx, "b", bin, "testbed", "tcp-sink", "--listen", sinkAddr)
	out, _ := sink.StdoutPipe()
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	sinkDone := make(chan struct{})
	go func() { sink.Wait(); close(sinkDone) }()
	defer sink.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, "listening on") {
		t.Fatalf("tcp-sink did not start: %q %v", line, err)
	}
	send := func(from string, bytes string) float64 {
		cmd, _ := b.Command(ctx, from, bin, "testbed", "tcp-send", sinkAddr, "--bytes", bytes, "--max-time", "20s")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tcp-send from %s: %v %s", from, err, out)
		}
		m := regexp.MustCompile(`\(([0-9.]+) Mbit/s\)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("tcp-send output %q", out)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	// a (100mbit) to b (100mbit): the shaped rate, within 10%.
	if got := send("a", "12M"); got < 90 || got > 110 {
		t.Fatalf("a -> b at %.1f Mbit/s, want 100 within 10%%", got)
	}
	// c is unshaped but b receives at 100mbit.
	if got := send("c", "12M"); got < 90 || got > 110 {
		t.Fatalf("c -> b at %.1f Mbit/s, want 100 (b's link) within 10%%", got)
	}
	if st := b.State(); st[1].Procs != 1 || st[0].Shaped != "100Mbit" || st[2].Shaped != "" {
		t.Fatalf("state %+v", st)
	}
	if err := Down(name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sinkDone:
	case <-time.After(5 * time.Second):
		t.Fatal("process in the bed survived down")
	}
	if l := leftovers(name); len(l) > 0 {
		t.Fatalf("left after down: %v", l)
	}
	if err := Down(name); err != nil {
		t.Fatalf("down of a bed already gone: %v", err)
	}
}

func TestFailedUpLeavesNothing(t *testing.T) {
	needRoot(t)
	name := bedName(t)
	spec := NewSpec(name, []string{"a", "b", "c", "d"}, "100mbit")
	spec.Hosts[2].Rate = "99999999999999gbit" // passes the pattern, tc refuses it: fails halfway
	t.Cleanup(func() { Down(name) })
	if _, err := Up(spec); err == nil {
		t.Fatal("up with a rate tc refuses succeeded")
	}
	if l := leftovers(name); len(l) > 0 {
		t.Fatalf("left after a failed up: %v", l)
	}
}

func TestValidate(t *testing.T) {
	bad := []Spec{
		NewSpec("Bad", []string{"a"}, ""),
		NewSpec("toolongname", []string{"a"}, ""),
		NewSpec("ok", []string{"a", "a"}, ""),
		NewSpec("ok", []string{"A"}, ""),
		NewSpec("ok", []string{"a"}, "fast"),
		NewSpec("ok", nil, ""),
	}
	for i, s := range bad {
		if s.Validate() == nil {
			t.Errorf("case %d accepted: %+v", i, s)
		}
	}
	if err := NewSpec("ok", []string{"client", "node1"}, "1gbit").Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestPriorityBands: with TopRate, a packet marked EF (ping -Q 0xb8)
// crosses a link saturated by an unmarked TCP flow without queueing
// behind it; an unmarked ping in the same run queues.
func TestPriorityBands(t *testing.T) {
	needRoot(t)
	lab.Need(t, lab.Tool("ping"))
	name := bedName(t)
	spec := NewSpecOn(name, netip.MustParsePrefix("10.78.0.0/24"), []string{"a", "b"}, "20mbit")
	spec.Hosts[0].TopRate = "5mbit"
	spec.Hosts[1].Rate = "" // only a's link: nothing else queues
	t.Cleanup(func() { Down(name) })
	b, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	o, err := exec.Command("ip", "netns", "exec", b.Netns("a"), "tc", "filter", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(o), "flowid 1:20") {
		t.Fatalf("no EF filter on a's eth0: %v %s", err, o)
	}
	if st := b.State(); st[0].Shaped != "20Mbit" {
		t.Fatalf("state shows a shaped to %q, want the link's 20Mbit (not a band's)", st[0].Shaped)
	}
	bin := pfstest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sinkAddr := b.Hosts[1].Addr.String() + ":5001"
	sink, _ := b.Command(ctx, "b", bin, "testbed", "tcp-sink", "--listen", sinkAddr)
	out, _ := sink.StdoutPipe()
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sink.Process.Kill(); sink.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, "listening on") {
		t.Fatalf("tcp-sink did not start: %q %v", line, err)
	}
	// 15 MB at 20 Mbit/s: 6 s of a full queue.
	flood, _ := b.Command(ctx, "a", bin, "testbed", "tcp-send", sinkAddr, "--bytes", "15M", "--max-time", "30s")
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { flood.Process.Kill(); flood.Wait() }()
	time.Sleep(time.Second) // the queue fills
	avg := func(tos string) (float64, error) {
		args := []string{"ping", "-n", "-q", "-c", "10", "-i", "0.2", "-W", "5"}
		if tos != "" {
			args = append(args, "-Q", tos)
		}
		cmd, _ := b.Command(ctx, "a", append(args, b.Hosts[1].Addr.String())...)
		o, err := cmd.CombinedOutput()
		m := regexp.MustCompile(`= [0-9.]+/([0-9.]+)/`).FindSubmatch(o)
		if m == nil {
			return 0, fmt.Errorf("ping %s: %v %s", tos, err, o)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
	type res struct {
		ms  float64
		err error
	}
	ef, plain := make(chan res, 1), make(chan res, 1)
	go func() { v, err := avg("0xb8"); ef <- res{v, err} }()
	go func() { v, err := avg(""); plain <- res{v, err} }()
	e, p := <-ef, <-plain
	if e.err != nil || p.err != nil {
		t.Fatal(e.err, p.err)
	}
	t.Logf("under a saturating flow: EF ping avg %.2f ms, unmarked %.2f ms", e.ms, p.ms)
	if e.ms*10 > p.ms {
		t.Fatalf("EF ping avg %.2f ms not well below the unmarked %.2f ms: the bands do not prioritise", e.ms, p.ms)
	}
}
